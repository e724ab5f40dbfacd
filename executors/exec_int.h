/* exec_int.h — what the executor backends share: the handle's common head (backend, log
 * files, private temporary directory) and the helpers around it. Private to executors/. */
#ifndef TF_EXEC_INT_H
#define TF_EXEC_INT_H

#include "executors/executor.h"

#include <limits.h>

struct tf_exec {
	const struct tf_executor_ops *ops; /* the backend */
	char dir[PATH_MAX];                /* log directory */
	int own_dir;                       /* dir is a private temporary one: removed on free */
	char out_path[PATH_MAX];           /* stdout.log */
	char err_path[PATH_MAX];           /* stderr.log */
	struct tf_objstore *store;         /* logs go here on completion (borrowed), or NULL */
	char *log_prefix;                  /* key prefix for them (owned) */
	double started;                    /* monotonic start time */
	int uploaded;                      /* the upload was attempted: 1 ok, -1 failed */
	long pgid;                         /* process group of a child (local), 0: none */
};

/* Fills the head: log directory (created, or a private mkdtemp) and paths. */
int tf_exec_head_init(struct tf_exec *x, const struct tf_executor_ops *ops,
                      const struct tf_exec_spec *spec, char *err, size_t errlen);
/* Uploads both logs once (when a store was given); notes the outcome in res. */
void tf_exec_head_finish(struct tf_exec *x, struct tf_exec_result *res);
/* The other way: fetches both logs once from the store into the log directory (a backend
 * whose job put them there itself); notes the outcome in res. */
void tf_exec_head_fetch(struct tf_exec *x, struct tf_exec_result *res);
/* Removes a private log directory; frees what the head owns. */
void tf_exec_head_release(struct tf_exec *x);

#endif
