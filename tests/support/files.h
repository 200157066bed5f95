/*
 * files.h - small file-system helpers the tests share.
 */
#ifndef TESTS_SUPPORT_FILES_H
#define TESTS_SUPPORT_FILES_H

/* Removes the plain files directly inside `dir`, then `dir` itself. Best effort: errors
 * are ignored (a test's temporary directory is all it is for). */
void support_remove_dir(const char *dir);

#endif
