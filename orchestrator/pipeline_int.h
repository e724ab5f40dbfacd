/* pipeline_int.h — what the pipeline_*.c files share: the YAML node tree (stage 1), the
 * loader's state (stage 2) and the loader's helpers one file calls in another (prefix tf_pl_).
 * Internal to the loader; pipeline.c explains the two stages and the invariants.
 */
#ifndef TF_PIPELINE_INT_H
#define TF_PIPELINE_INT_H

#include "orchestrator/pipeline.h"

#include <jansson.h>
#include <stdint.h>
#include <yaml.h>

enum ykind { Y_SCALAR, Y_SEQ, Y_MAP };

struct ynode {
	enum ykind kind;           /* scalar, sequence or mapping */
	int line, col;             /* start (1-based) */
	int end_line, end_col;     /* end (1-based, exclusive column) */
	yaml_scalar_style_t style; /* scalar style: plain, quoted, literal, folded */
	char *str;                 /* scalar text, NUL-terminated (arena) */
	size_t len;                /* scalar length in bytes */
	struct ynode **kids;       /* seq: items; map: key, value, key, value... (arena) */
	size_t n, cap;             /* kids used / allocated */
	size_t size;               /* nodes in this subtree with aliases expanded (saturating) */
};

/* Every allocation of the tree goes through the arena, so failure paths free one list. */
struct arena {
	void **ptrs;
	size_t n, cap;
};

struct anchor {
	char *name;         /* anchor name (arena) */
	struct ynode *node; /* the completed node it names */
};

struct ybuild {
	const char *file;
	struct tf_diag_list *d;
	struct arena arena;
	struct ynode *stack[TF_PIPELINE_MAX_DEPTH + 1];      /* open collections */
	const char *stack_anchor[TF_PIPELINE_MAX_DEPTH + 1]; /* their anchors, or NULL */
	int depth;
	struct anchor *anchors;
	size_t nanchors, capanchors;
	size_t total;   /* materialised nodes so far (aliases expanded) */
	size_t aliases; /* alias uses so far */
	struct ynode *root;
};

/* Loader-side facts about a step that the public struct does not keep. */
struct stepx {
	const struct ynode *node;        /* the step's mapping */
	const struct ynode *name_node;   /* its `name` value, or NULL */
	const struct ynode **need_nodes; /* `needs` items, parallel to tf_step.needs */
	const struct ynode *with_node;   /* `with` mapping, or NULL */
	const struct ynode *when_node;   /* `when` scalar, or NULL */
	int ok;                          /* name and type were valid */
};

struct loader {
	const char *file;
	struct tf_diag_list *d;
	struct tf_pipeline *p;
	struct stepx *sx;   /* one per step */
	uint64_t *upstream; /* nsteps x words bitsets of transitive needs, when dag_ok */
	size_t words;       /* uint64 words per bitset */
	int dag_ok;         /* needs resolved and acyclic */
	const struct ynode *defaults_executor; /* `defaults.executor`, or NULL */
	size_t cur_step;                       /* step whose refs are being checked */
	unsigned flags;
	struct nameidx *sidx; /* step names sorted, for O(log n) lookups */
	size_t nsidx;
};

struct nameidx {
	const char *name; /* step name (borrowed from tf_step) */
	size_t idx;       /* index into tf_pipeline.steps */
};

/* ---- pipeline_yaml.c ---- */

void tf_pl_arena_free(struct arena *a);
int tf_pl_build_tree(struct ybuild *b, const char *buf, size_t len);
int tf_pl_diag_room(const struct loader *L);
void tf_pl_err_at(struct loader *L, const struct ynode *n, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *tf_pl_kind_name(const struct ynode *n);
int tf_pl_is_plain(const struct ynode *n);
int tf_pl_scalar_null(const struct ynode *n);
int tf_pl_parse_bool_text(const char *s, int *out);
int tf_pl_parse_int_text(const char *s, long long *out);
int tf_pl_parse_float_text(const char *s, double *out);
json_t *tf_pl_scalar_json(const struct ynode *n);
const struct ynode *tf_pl_map_get(const struct ynode *m, const char *key);
void tf_pl_check_keys(struct loader *L, const struct ynode *m, const char *const *allowed,
                      const char *what);
int tf_pl_want_kind(struct loader *L, const struct ynode *n, enum ykind k, const char *what);
char *tf_pl_get_string(struct loader *L, const struct ynode *n, const char *what);
int tf_pl_get_bool(struct loader *L, const struct ynode *n, const char *what, int *out);
int tf_pl_get_int(struct loader *L, const struct ynode *n, const char *what, long long lo,
                  long long hi, long long *out);
int tf_pl_get_number(struct loader *L, const struct ynode *n, const char *what, double lo,
                     double *out);
int tf_pl_get_duration(struct loader *L, const struct ynode *n, const char *what, double *out);
int tf_pl_get_enum(struct loader *L, const struct ynode *n, const char *what,
                   const char *const *names, int *out);
int tf_pl_valid_name(const char *s);
const char *tf_pl_name_hint(const char *s);
int tf_pl_valid_env_name(const char *s);

/* ---- pipeline_dag.c ---- */

int tf_pl_cmp_nameidx(const void *a, const void *b);
int tf_pl_step_lookup(const struct loader *L, const char *name);
const char *tf_pl_suggest_step(const struct loader *L, const char *word, size_t self);
void tf_pl_resolve_needs(struct loader *L, size_t idx, const struct ynode *needs);
void tf_pl_find_cycles(struct loader *L);
void tf_pl_compute_order(struct loader *L);
int tf_pl_is_upstream(const struct loader *L, size_t step, size_t of);

/* ---- pipeline_schema.c ---- */

void tf_pl_load_with(struct loader *L, size_t idx);
void tf_pl_load_when(struct loader *L, size_t idx);
/* Is the scalar's text exactly its column span on one line (so offsets map to columns)?
 * Returns the column of its first character via *col. */
int tf_pl_scalar_exact(const struct ynode *n, int *col);
/* The static type of a reference to a param of type t. */
enum tf_vtype tf_pl_param_vtype(enum tf_param_type t);

/* ---- pipeline_alerts.c ---- */

void tf_pl_load_alerts(struct loader *L, const struct ynode *n);
void tf_pl_alerts_free(struct tf_pipeline *p);

#endif
