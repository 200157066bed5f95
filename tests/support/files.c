/*
 * files.c - small file-system helpers the tests share.
 */
#include "tests/support/files.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void support_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];

    if (d != NULL) {
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}
