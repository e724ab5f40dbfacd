/* testutil.h — small helpers shared by the test binaries that drive the real `tpuflow`
 * binary or read its JSON summaries. tests/testutil.c is linked into every test binary. */
#ifndef TF_TESTS_TESTUTIL_H
#define TF_TESTS_TESTUTIL_H

#include <jansson.h>
#include <sys/types.h>

/* The Fashion-MNIST training images the ml tests need; they skip when it is absent. */
#define TF_TEST_FMNIST "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

/* The directory a test binary keeps its files in: $TF_TEST_TMP (tests/run.sh gives each binary
 * its own), else a new one under $TMPDIR (or /tmp) made on the first call, so a binary run by
 * hand never works in a fixed, shared path. The same string on every call; never freed. */
const char *tf_test_tmp(void);

/* Starts ARGV (argv[0] a path) as a child process that appends its stdout to the file OUT and,
 * if ERR is not NULL, its stderr to ERR (OUT and ERR may name the same file); stderr stays the
 * test's own otherwise. Returns the child's pid, or -1 if fork failed. */
pid_t tf_test_spawn(char *const argv[], const char *out, const char *err);

/* Waits for PID and returns its exit code, or 128 + the signal that ended it. */
int tf_test_wait_exit(pid_t pid);

/* Runs `$TPUFLOW_BIN --home home ARGS...` (ARGS NULL-terminated, at most 12) in the current
 * directory and returns its exit code; its stdout and stderr are left in out.txt and err.txt
 * and, when OUT/ERR are not NULL, returned as new strings the caller frees. */
int tf_test_cli(const char *const args[], char **out, char **err);

/* Writes TEXT to the file PATH (created or truncated); fails the running test if it cannot
 * be opened. */
void tf_test_write_file(const char *path, const char *text);

/* Parses the JSON file at PATH; on failure prints why to stderr and returns NULL. The caller
 * owns the result. */
json_t *tf_test_load_json(const char *path);

/* The object of step NAME in a run summary's "steps" array (borrowed); fails the running test
 * if there is none. */
json_t *tf_test_step_of(json_t *summary, const char *name);

/* Writes a small real model bundle (4 float features -> 3 -> 2 classes, the same export
 * path as `train`) under PREFIX ("…/") in the store at URL. 0 or a negative errno. */
int tf_test_write_bundle(const char *url, const char *prefix);

#endif
