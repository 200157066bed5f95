/*
 * files.c - small file-system helpers the tests share.
 */
#include "tests/support/files.h"

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

/* nftw visits a directory's entries before the directory (FTW_DEPTH), so each is empty by
 * the time it is removed. */
static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    remove(path);
    return 0; /* best effort: go on past an entry that would not go */
}

void support_remove_dir(const char *dir)
{
    /* FTW_PHYS: a symbolic link is removed, never followed out of the directory. */
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
