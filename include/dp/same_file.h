/* Whether two paths name one file, existing or not: outputs are compared with each other and
 * with the run's inputs before anything is written, so no option's file overwrites another's. */
#ifndef DP_SAME_FILE_H
#define DP_SAME_FILE_H

/* 1 when a and b name one file: the same device and inode when both exist, otherwise the same
 * directory (by identity) and the same last component; 0 otherwise. */
int dp_same_file(const char *a, const char *b);

/* 1 when path's directory is dir (by identity); 0 otherwise or when either cannot be found. */
int dp_file_in_dir(const char *path, const char *dir);

#endif
