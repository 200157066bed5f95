/*
 * files.h - small file-system helpers the tests share.
 */
#ifndef TESTS_SUPPORT_FILES_H
#define TESTS_SUPPORT_FILES_H

/* Removes `dir` and everything under it (a server's data directory has subdirectories:
 * etcd's member/wal, member/snap), never following a symbolic link. Best effort: errors
 * are ignored (a test's temporary directory is all it is for). */
void support_remove_dir(const char *dir);

#endif
