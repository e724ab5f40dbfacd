/* pipeline.c — loads a pipeline YAML file into struct tf_pipeline and checks it.
 *
 * Two stages. (1) YAML -> a small node tree, through libyaml's event parser, under hard
 * limits: file size, nesting depth, alias uses, and "materialised" nodes, i.e. the node count
 * with every alias expanded. An alias shares its anchor's subtree instead of copying it, and
 * each node knows its expanded size, so a billion-laughs document is refused after a few
 * dozen events without expanding anything. (2) The tree -> typed structs, reporting every
 * problem with its line:col: keys, types, durations, params and overrides, steps, `needs`,
 * cycles, the step-type schema, references and `when` expressions.
 *
 * Invariants: (a) every later walk of the tree touches at most TF_PIPELINE_MAX_NODES nodes;
 * (b) the semantic stage never stops at the first problem: a bad value is reported and the
 * walk goes on with the next key; (c) checks that depend on a sound DAG (upstream references,
 * levels) run only when the DAG is sound, so one mistake does not cascade. */
#include "orchestrator/pipeline.h"

#include "accel/tpu.h"
#include "common/common.h"
#include "orchestrator/registry.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

/* ---- stage 1: YAML -> node tree ----------------------------------------------------- */

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

static void *arena_keep(struct arena *a, void *p)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 256;
		a->ptrs = tf_xrealloc(a->ptrs, a->cap * sizeof(void *));
	}
	a->ptrs[a->n++] = p;
	return p;
}

static void arena_free(struct arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->ptrs[i]);
	free(a->ptrs);
	memset(a, 0, sizeof(*a));
}

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

static size_t sat_add(size_t a, size_t b)
{
	return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

static struct ynode *new_node(struct ybuild *b, enum ykind kind, const yaml_event_t *ev)
{
	struct ynode *n = arena_keep(&b->arena, tf_xcalloc(1, sizeof(*n)));
	n->kind = kind;
	n->line = (int)ev->start_mark.line + 1;
	n->col = (int)ev->start_mark.column + 1;
	n->end_line = (int)ev->end_mark.line + 1;
	n->end_col = (int)ev->end_mark.column + 1;
	n->size = 1;
	return n;
}

static void add_kid(struct ybuild *b, struct ynode *parent, struct ynode *kid)
{
	if (parent->n == parent->cap) {
		size_t cap = parent->cap ? parent->cap * 2 : 8;
		struct ynode **k = arena_keep(&b->arena, tf_xmalloc(cap * sizeof(*k)));
		if (parent->n)
			memcpy(k, parent->kids, parent->n * sizeof(*k));
		parent->kids = k; /* the old array stays in the arena until the end */
		parent->cap = cap;
	}
	parent->kids[parent->n++] = kid;
	parent->size = sat_add(parent->size, kid->size);
}

static void set_anchor(struct ybuild *b, const char *name, struct ynode *n)
{
	if (!name)
		return;
	if (b->nanchors == b->capanchors) {
		b->capanchors = b->capanchors ? b->capanchors * 2 : 16;
		b->anchors = tf_xrealloc(b->anchors, b->capanchors * sizeof(*b->anchors));
	}
	b->anchors[b->nanchors].name = arena_keep(&b->arena, tf_xstrdup(name));
	b->anchors[b->nanchors].node = n;
	b->nanchors++;
}

static struct ynode *find_anchor(struct ybuild *b, const char *name)
{
	for (size_t i = b->nanchors; i-- > 0;) /* the latest definition wins */
		if (!strcmp(b->anchors[i].name, name))
			return b->anchors[i].node;
	return NULL;
}

/* Attaches a finished scalar to the open collection (or makes it the root). 0 or -E2BIG. */
static int attach(struct ybuild *b, struct ynode *n, const yaml_event_t *ev)
{
	b->total = sat_add(b->total, 1);
	if (b->total > TF_PIPELINE_MAX_NODES) {
		tf_diag_add(b->d, TF_DIAG_ERROR, b->file, (int)ev->start_mark.line + 1,
		            (int)ev->start_mark.column + 1,
		            "split the pipeline or remove repetition",
		            "document too large: more than %d YAML nodes", TF_PIPELINE_MAX_NODES);
		return -E2BIG;
	}
	if (b->depth == 0)
		b->root = n;
	else
		add_kid(b, b->stack[b->depth - 1], n);
	return 0;
}

/* Does the line holding byte `off` (or the one before it) contain "${"? Used to explain the
 * commonest YAML surprise: `{` and `}` end a plain value inside [...] and {...}. */
static int ref_near(const char *buf, size_t len, size_t off)
{
	if (off > len)
		off = len;
	size_t start = off, end = off;
	for (int lines = 0; start > 0 && lines < 2; start--)
		if (buf[start - 1] == '\n' && ++lines == 2)
			break;
	while (end < len && buf[end] != '\n')
		end++;
	for (size_t i = start; i + 1 < end; i++)
		if (buf[i] == '$' && buf[i + 1] == '{')
			return 1;
	return 0;
}

static int yaml_error(struct ybuild *b, const yaml_parser_t *p, const char *buf, size_t len)
{
	const yaml_mark_t *m = &p->problem_mark;
	int line = (int)m->line + 1, col = (int)m->column + 1;
	const char *problem = p->problem ? p->problem : "malformed YAML";
	const char *hint = NULL;
	if (p->context && strstr(p->context, "flow") && ref_near(buf, len, m->index))
		hint = "inside [...] and {...}, quote values that contain ${...}: \"${params.x}\"";
	if (m->index < len && buf[m->index] == '\t')
		hint = "YAML does not allow tabs for indentation: indent with spaces";
	if (p->error == YAML_READER_ERROR) {
		/* the reader reports a byte offset: turn it into a line and column */
		size_t off = p->problem_offset < len ? p->problem_offset : len;
		int rl = 1, rc = 1;
		for (size_t i = 0; i < off; i++) {
			if (buf[i] == '\n') {
				rl++;
				rc = 1;
			} else if (((unsigned char)buf[i] & 0xc0) != 0x80) {
				rc++;
			}
		}
		tf_diag_add(b->d, TF_DIAG_ERROR, b->file, rl, rc,
		            off < len && buf[off] == '\0'
		                ? "the file holds a NUL byte: it is binary, or was saved as UTF-16"
		                : "save the file as UTF-8 text",
		            "YAML syntax error: %s (byte %zu)", problem, p->problem_offset);
	} else if (p->context) {
		tf_diag_add(b->d, TF_DIAG_ERROR, b->file, line, col, hint,
		            "YAML syntax error: %s %s (line %d, column %d)", problem, p->context,
		            (int)p->context_mark.line + 1, (int)p->context_mark.column + 1);
	} else {
		tf_diag_add(b->d, TF_DIAG_ERROR, b->file, line, col, hint, "YAML syntax error: %s",
		            problem);
	}
	return -EINVAL;
}

/* Parses buf into b->root. 0, or a negative code with a diagnostic added. */
static int build_tree(struct ybuild *b, const char *buf, size_t len)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	int rc = 0, done = 0, docs = 0;

	if (!yaml_parser_initialize(&parser)) {
		tf_diag_error(b->d, b->file, 0, 0, "cannot initialise the YAML parser");
		return -ENOMEM;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	while (!done) {
		if (!yaml_parser_parse(&parser, &ev)) {
			rc = yaml_error(b, &parser, buf, len);
			break;
		}
		struct ynode *n = NULL;
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (++docs > 1) {
				tf_diag_add(b->d, TF_DIAG_ERROR, b->file,
				            (int)ev.start_mark.line + 1,
				            (int)ev.start_mark.column + 1,
				            "put each pipeline in its own file",
				            "more than one YAML document in the file");
				rc = -EINVAL;
			}
			break;
		case YAML_SCALAR_EVENT:
			n = new_node(b, Y_SCALAR, &ev);
			n->len = ev.data.scalar.length;
			n->str = arena_keep(&b->arena, tf_xmalloc(n->len + 1));
			memcpy(n->str, ev.data.scalar.value, n->len);
			n->str[n->len] = '\0';
			n->style = ev.data.scalar.style;
			rc = attach(b, n, &ev);
			if (!rc)
				set_anchor(b, (const char *)ev.data.scalar.anchor, n);
			break;
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (b->depth >= TF_PIPELINE_MAX_DEPTH) {
				tf_diag_add(
				    b->d, TF_DIAG_ERROR, b->file, (int)ev.start_mark.line + 1,
				    (int)ev.start_mark.column + 1, NULL,
				    "nesting too deep: more than %d levels of lists and maps",
				    TF_PIPELINE_MAX_DEPTH);
				rc = -E2BIG;
				break;
			}
			n = new_node(b, ev.type == YAML_MAPPING_START_EVENT ? Y_MAP : Y_SEQ, &ev);
			b->total = sat_add(b->total, 1);
			if (b->total > TF_PIPELINE_MAX_NODES) {
				tf_diag_add(b->d, TF_DIAG_ERROR, b->file, n->line, n->col,
				            "split the pipeline or remove repetition",
				            "document too large: more than %d YAML nodes",
				            TF_PIPELINE_MAX_NODES);
				rc = -E2BIG;
				break;
			}
			b->stack[b->depth] = n;
			{
				const yaml_char_t *anchor = ev.type == YAML_MAPPING_START_EVENT
				                                ? ev.data.mapping_start.anchor
				                                : ev.data.sequence_start.anchor;
				b->stack_anchor[b->depth] =
				    anchor ? arena_keep(&b->arena, tf_xstrdup((const char *)anchor))
				           : NULL;
			}
			b->depth++;
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT: {
			if (b->depth == 0) { /* libyaml balances events; never trust it blindly */
				tf_diag_error(b->d, b->file, (int)ev.start_mark.line + 1,
				              (int)ev.start_mark.column + 1,
				              "unbalanced YAML structure");
				rc = -EINVAL;
				break;
			}
			struct ynode *c = b->stack[--b->depth];
			c->end_line = (int)ev.end_mark.line + 1;
			c->end_col = (int)ev.end_mark.column + 1;
			if (b->depth == 0)
				b->root = c;
			else
				add_kid(b, b->stack[b->depth - 1], c);
			set_anchor(b, b->stack_anchor[b->depth], c);
			break;
		}
		case YAML_ALIAS_EVENT: {
			const char *name = (const char *)ev.data.alias.anchor;
			struct ynode *target = find_anchor(b, name);
			if (!target) {
				tf_diag_add(
				    b->d, TF_DIAG_ERROR, b->file, (int)ev.start_mark.line + 1,
				    (int)ev.start_mark.column + 1,
				    "define '&NAME' on a complete value before using '*NAME'",
				    "unknown alias '*%s'", name);
				rc = -EINVAL;
				break;
			}
			if (++b->aliases > TF_PIPELINE_MAX_ALIASES) {
				tf_diag_add(b->d, TF_DIAG_ERROR, b->file,
				            (int)ev.start_mark.line + 1,
				            (int)ev.start_mark.column + 1, NULL,
				            "too many aliases: more than %d uses of '*'",
				            TF_PIPELINE_MAX_ALIASES);
				rc = -E2BIG;
				break;
			}
			/* shared, not copied: count what a walk of the tree would visit */
			b->total = sat_add(b->total, target->size);
			if (b->total > TF_PIPELINE_MAX_NODES) {
				tf_diag_add(
				    b->d, TF_DIAG_ERROR, b->file, (int)ev.start_mark.line + 1,
				    (int)ev.start_mark.column + 1,
				    "a YAML alias bomb looks like this; remove the nested aliases",
				    "alias '*%s' expands the document past %d nodes", name,
				    TF_PIPELINE_MAX_NODES);
				rc = -E2BIG;
				break;
			}
			if (b->depth == 0)
				b->root = target;
			else
				add_kid(b, b->stack[b->depth - 1], target);
			break;
		}
		default:
			break;
		}
		yaml_event_delete(&ev);
		if (rc)
			break;
	}
	yaml_parser_delete(&parser);
	return rc;
}

/* ---- stage 2 helpers: the loader, errors and scalar typing -------------------------- */

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

static int cmp_nameidx(const void *a, const void *b)
{
	const struct nameidx *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

static int step_lookup(const struct loader *L, const char *name)
{
	size_t lo = 0, hi = L->nsidx;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(L->sidx[mid].name, name);
		if (!c)
			return (int)L->sidx[mid].idx;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Room left in the diagnostics list: suggestions are skipped once it is full, so hostile
 * input cannot make "did you mean" searches the expensive part. */
static int diag_room(const struct loader *L)
{
	return L->d->n < TF_DIAG_MAX;
}

static void err_at(struct loader *L, const struct ynode *n, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void err_at(struct loader *L, const struct ynode *n, const char *hint, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	tf_diag_add(L->d, TF_DIAG_ERROR, L->file, n ? n->line : 0, n ? n->col : 0, hint, "%s",
	            msg ? msg : "error");
	free(msg);
}

static const char *kind_name(const struct ynode *n)
{
	switch (n->kind) {
	case Y_SEQ:
		return "a list";
	case Y_MAP:
		return "a mapping";
	default:
		return "a scalar";
	}
}

static int is_plain(const struct ynode *n)
{
	return n->kind == Y_SCALAR && n->style == YAML_PLAIN_SCALAR_STYLE;
}

static int scalar_null(const struct ynode *n)
{
	return is_plain(n) && (!n->str[0] || !strcmp(n->str, "~") || !strcmp(n->str, "null") ||
	                       !strcmp(n->str, "Null") || !strcmp(n->str, "NULL"));
}

static int parse_bool_text(const char *s, int *out)
{
	if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
		*out = 1;
		return 0;
	}
	if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
		*out = 0;
		return 0;
	}
	return -EINVAL;
}

static int parse_int_text(const char *s, long long *out)
{
	if (!*s || isspace((unsigned char)*s))
		return -EINVAL;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (*end || errno)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_float_text(const char *s, double *out)
{
	if (!*s || isspace((unsigned char)*s))
		return -EINVAL;
	for (const char *c = s; *c; c++) /* no hex floats, inf or nan */
		if (!strchr("0123456789+-.eE", *c))
			return -EINVAL;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (*end || errno || !isfinite(v))
		return -EINVAL;
	*out = v;
	return 0;
}

/* A plain scalar as JSON by its looks (YAML core schema): null, bool, int, float, else
 * string. Quoted scalars are always strings. */
static json_t *scalar_json(const struct ynode *n)
{
	long long i;
	double f;
	int b;
	if (is_plain(n)) {
		if (scalar_null(n))
			return json_null();
		if (!parse_bool_text(n->str, &b))
			return json_boolean(b);
		if (!parse_int_text(n->str, &i))
			return json_integer(i);
		if (!parse_float_text(n->str, &f))
			return json_real(f);
	}
	json_t *s = json_stringn(n->str, n->len);
	return s ? s : json_stringn_nocheck(n->str, n->len);
}

/* Looks a key up in a mapping; NULL when absent. */
static const struct ynode *map_get(const struct ynode *m, const char *key)
{
	if (!m || m->kind != Y_MAP)
		return NULL;
	for (size_t i = 0; i + 1 < m->n; i += 2)
		if (m->kids[i]->kind == Y_SCALAR && !strcmp(m->kids[i]->str, key))
			return m->kids[i + 1];
	return NULL;
}

static void report_dup_key(struct loader *L, const struct ynode *first, const struct ynode *k,
                           const char *what)
{
	char hint[96];
	snprintf(hint, sizeof(hint), "the first is at line %d, column %d", first->line, first->col);
	err_at(L, k, hint, "duplicate key '%.60s' in %s", k->str, what);
}

static int cmp_key_node(const void *a, const void *b)
{
	const struct ynode *x = *(const struct ynode *const *)a,
	                   *y = *(const struct ynode *const *)b;
	int c = strcmp(x->str, y->str);
	if (c)
		return c;
	return x->line != y->line ? (x->line < y->line ? -1 : 1)
	                          : (x->col < y->col ? -1 : x->col > y->col);
}

/* Duplicate keys of a large mapping in O(n log n): sort the scalar keys, compare neighbours.
 * (An alias may put the same key node in a map twice; position ties keep it reported.) */
static void dup_keys_sorted(struct loader *L, const struct ynode *m, const char *what)
{
	const struct ynode **keys = tf_xcalloc(m->n / 2 + 1, sizeof(*keys));
	size_t n = 0;
	for (size_t i = 0; i + 1 < m->n; i += 2)
		if (m->kids[i]->kind == Y_SCALAR)
			keys[n++] = m->kids[i];
	qsort(keys, n, sizeof(*keys), cmp_key_node);
	for (size_t i = 1, first = 0; i < n; i++) {
		if (strcmp(keys[i]->str, keys[first]->str))
			first = i;
		else if (L->d->n < TF_DIAG_MAX)
			report_dup_key(L, keys[first], keys[i], what);
	}
	free(keys);
}

/* Reports unknown, non-scalar and duplicate keys of a mapping against `allowed`.
 * `what` names the mapping in messages ("step 'train'"). */
static void check_keys(struct loader *L, const struct ynode *m, const char *const *allowed,
                       const char *what)
{
	if (m->n > 64)
		dup_keys_sorted(L, m, what);
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const struct ynode *k = m->kids[i];
		if (k->kind != Y_SCALAR) {
			err_at(L, k, NULL, "keys in %s must be plain names, not %s", what,
			       kind_name(k));
			continue;
		}
		if (m->n <= 64) { /* small maps: direct search; large ones are sorted below */
			for (size_t j = 0; j < i; j += 2)
				if (m->kids[j]->kind == Y_SCALAR &&
				    !strcmp(m->kids[j]->str, k->str)) {
					report_dup_key(L, m->kids[j], k, what);
					break;
				}
		}
		if (!allowed)
			continue;
		int ok = 0;
		for (size_t a = 0; allowed[a]; a++)
			if (!strcmp(allowed[a], k->str))
				ok = 1;
		if (ok)
			continue;
		const char *near = tf_diag_suggest(k->str, allowed);
		char hint[512];
		if (near) {
			snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
		} else {
			size_t off = (size_t)snprintf(hint, sizeof(hint), "valid keys:");
			for (size_t a = 0; allowed[a] && off < sizeof(hint); a++)
				off += (size_t)snprintf(hint + off, sizeof(hint) - off, "%s %s",
				                        a ? "," : "", allowed[a]);
		}
		err_at(L, k, hint, "unknown key '%.60s' in %s", k->str, what);
	}
}

static int want_kind(struct loader *L, const struct ynode *n, enum ykind k, const char *what)
{
	if (n->kind == k)
		return 0;
	const char *want = k == Y_MAP ? "a mapping" : k == Y_SEQ ? "a list" : "a scalar";
	err_at(L, n, NULL, "%s must be %s, not %s", what, want, kind_name(n));
	return -EINVAL;
}

static char *get_string(struct loader *L, const struct ynode *n, const char *what)
{
	if (want_kind(L, n, Y_SCALAR, what))
		return NULL;
	return tf_xstrdup(n->str);
}

static int get_bool(struct loader *L, const struct ynode *n, const char *what, int *out)
{
	if (want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	if (!is_plain(n) || parse_bool_text(n->str, out)) {
		err_at(L, n, "write true or false (without quotes)",
		       "%s must be true or false, not '%.40s'", what, n->str);
		return -EINVAL;
	}
	return 0;
}

static int get_int(struct loader *L, const struct ynode *n, const char *what, long long lo,
                   long long hi, long long *out)
{
	if (want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	long long v;
	if (!is_plain(n) || parse_int_text(n->str, &v)) {
		err_at(L, n, NULL, "%s must be an integer, not '%.40s'", what, n->str);
		return -EINVAL;
	}
	if (v < lo || v > hi) {
		err_at(L, n, NULL, "%s must be between %lld and %lld, not %lld", what, lo, hi, v);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int get_number(struct loader *L, const struct ynode *n, const char *what, double lo,
                      double *out)
{
	if (want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	double v;
	if (!is_plain(n) || parse_float_text(n->str, &v)) {
		err_at(L, n, NULL, "%s must be a number, not '%.40s'", what, n->str);
		return -EINVAL;
	}
	if (v < lo) {
		err_at(L, n, NULL, "%s must be at least %g, not %g", what, lo, v);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int tf_duration_parse(const char *s, double *seconds)
{
	double total = 0, x;
	if (!s || !*s)
		return -EINVAL;
	if (!parse_float_text(s, &x)) { /* a plain number is seconds */
		if (x < 0)
			return -EINVAL;
		*seconds = x;
		return 0;
	}
	const char *c = s;
	while (*c) {
		if (!isdigit((unsigned char)*c) && *c != '.')
			return -EINVAL;
		char *end;
		double v = strtod(c, &end);
		if (end == c || !isfinite(v))
			return -EINVAL;
		c = end;
		double unit;
		if (!strncmp(c, "ms", 2)) {
			unit = 0.001;
			c += 2;
		} else if (*c == 's') {
			unit = 1;
			c++;
		} else if (*c == 'm') {
			unit = 60;
			c++;
		} else if (*c == 'h') {
			unit = 3600;
			c++;
		} else if (*c == 'd') {
			unit = 86400;
			c++;
		} else {
			return -EINVAL;
		}
		total += v * unit;
	}
	if (!isfinite(total) || total > 1e9)
		return -EINVAL;
	*seconds = total;
	return 0;
}

static int get_duration(struct loader *L, const struct ynode *n, const char *what, double *out)
{
	if (want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	if (tf_duration_parse(n->str, out)) {
		err_at(L, n,
		       "write a number of seconds or a duration such as 30s, 5m, 1h30m, 250ms",
		       "%s: bad duration '%.40s'", what, n->str);
		return -EINVAL;
	}
	return 0;
}

/* A scalar that must be one of `names` (indexed by enum value). */
static int get_enum(struct loader *L, const struct ynode *n, const char *what,
                    const char *const *names, int *out)
{
	if (want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	for (int i = 0; names[i]; i++)
		if (!strcmp(names[i], n->str)) {
			*out = i;
			return 0;
		}
	const char *near = tf_diag_suggest(n->str, names);
	char hint[256];
	if (near) {
		snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
	} else {
		size_t off = (size_t)snprintf(hint, sizeof(hint), "choose one of:");
		for (int i = 0; names[i] && off < sizeof(hint); i++)
			off += (size_t)snprintf(hint + off, sizeof(hint) - off, "%s %s",
			                        i ? "," : "", names[i]);
	}
	err_at(L, n, hint, "unknown %s '%.60s'", what, n->str);
	return -EINVAL;
}

static int valid_name(const char *s)
{
	if (!isalpha((unsigned char)s[0]) && s[0] != '_')
		return 0;
	for (const char *c = s; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
			return 0;
	return strlen(s) <= 64;
}

/* What to do about a name valid_name() refused: a long one is too long, whatever it holds. */
static const char *name_hint(const char *s)
{
	return strlen(s) > 64 ? "names are at most 64 characters"
	                      : "use letters, digits, '_' and '-', starting with a letter";
}

/* An environment variable name as POSIX shells take it: [A-Za-z_][A-Za-z0-9_]*. */
static int valid_env_name(const char *s)
{
	if (!isalpha((unsigned char)s[0]) && s[0] != '_')
		return 0;
	for (const char *c = s; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '_')
			return 0;
	return 1;
}

/* ---- names of enums and the step-type schema ---------------------------------------- */

static const char *const step_type_names[] = {"data_prep", "train", "evaluate", "register",
                                              "deploy",    "shell", NULL};
static const char *const failure_names[] = {"error", "timeout", "preempted", "infra", NULL};
static const char *const executor_names[] = {"inprocess", "local", "slurm", NULL};
static const char *const param_type_names[] = {"int", "float", "string", "bool", "list", NULL};

const char *tf_step_type_name(enum tf_step_type t)
{
	return (unsigned)t < TF_STEP_LAST ? step_type_names[t] : NULL;
}

const char *tf_failure_class_name(enum tf_failure_class c)
{
	return (unsigned)c < TF_FAILURE_LAST ? failure_names[c] : NULL;
}

const char *tf_executor_name(enum tf_executor_kind e)
{
	return (unsigned)e < TF_EXECUTOR_LAST ? executor_names[e] : NULL;
}

const char *tf_param_type_name(enum tf_param_type t)
{
	return (unsigned)t < TF_PARAM_LAST ? param_type_names[t] : NULL;
}

static const char *const sources[] = {"fashion-mnist", "csv", NULL};
static const char *const optimizers[] = {"sgd", "adam", "adamw", "lars", NULL};
static const char *const monitors[] = {"accuracy", "loss", "auc", NULL};
static const char *const schedules[] = {"cosine", "step", "constant", NULL};

/* Rows of the `with` schemas: W(key, check, help), then the rules on its value
 * (TF_WRULE_* of pipeline.h), checked at load (check_scalar, check_value_kind, load_with). */
#define W(k, c, h) .key = (k), .check = (c), .help = (h)
#define ENUM(k, names, h) W(k, TF_WCHECK_ENUM, h), .choices = (names)
#define RANGE(lo, hi) .rules = TF_WRULE_MIN | TF_WRULE_MAX, .min = (lo), .max = (hi)
#define AT_LEAST(x) .rules = TF_WRULE_MIN, .min = (x)
#define ABOVE(x) .rules = TF_WRULE_MIN_OPEN, .min = (x)
#define BIG ((double)(1u << 30)) /* the largest count the ml steps take */
#define I TF_WCHECK_INT
#define N TF_WCHECK_NUMBER
#define S TF_WCHECK_STRING
#define B TF_WCHECK_BOOL

/* clang-format off */
static const struct tf_with_key data_prep_with[] = {
    {ENUM("source", sources, "raw data: fashion-mnist (the Debian package) or csv"),
     .if_value = "csv", .requires = "path"},
    {W("path", S, "input file or directory (csv; fashion-mnist override)")},
    {W("shards", I, "number of TFRecord shards to write"), RANGE(1, 4096)},
    {W("csv_label", S, "name of the label column (csv)")},
    {W("test_fraction", N, "fraction held out for testing (csv)"),
     .rules = TF_WRULE_MIN_OPEN | TF_WRULE_MAX_OPEN, .min = 0, .max = 1},
    {W("seed", I, "shuffle seed"), AT_LEAST(0)},
    {W("limit_train", I, "keep the first N training examples (0: all)"), AT_LEAST(0)},
    {W("limit_test", I, "keep the first N test examples (0: all)"), AT_LEAST(0)},
    {.key = NULL}};
static const struct tf_with_key train_with[] = {
    {W("dataset", S, "dataset manifest key (from data_prep)")},
    {W("hidden", TF_WCHECK_INT_LIST, "hidden layer widths, e.g. [256, 128]"), RANGE(1, 1e6)},
    {W("epochs", I, "passes over the training set"), RANGE(1, BIG)},
    {W("batch", I, "global batch size"), RANGE(1, BIG)},
    {ENUM("optimizer", optimizers, "sgd, adam, adamw or lars")},
    {W("lr", N, "base learning rate"), ABOVE(0)},
    {W("momentum", N, "momentum (sgd, lars)"),
     .rules = TF_WRULE_MIN | TF_WRULE_MAX_OPEN, .min = 0, .max = 1},
    {W("weight_decay", N, "L2 weight decay"), AT_LEAST(0)},
    {W("warmup_epochs", N, "linear warmup length in epochs"), AT_LEAST(0)},
    {ENUM("schedule", schedules, "cosine, step or constant")},
    {W("seed", I, "initialisation and shuffle seed"), AT_LEAST(0)},
    {W("checkpoint_every", I, "steps between checkpoints"), AT_LEAST(0)},
    {W("max_steps", I, "stop after this many steps"), AT_LEAST(0)},
    {W("prefetch", I, "batches prefetched by the input pipeline"), RANGE(0, BIG)},
    {W("clip_norm", N, "clip the gradient's global norm"), AT_LEAST(0)},
    {W("decay_epochs", N, "step schedule: epochs between decays"), AT_LEAST(0)},
    {W("lars_eta", N, "LARS trust coefficient"), AT_LEAST(0)},
    {W("linear_scaling", B, "scale lr by batch / 256")},
    {W("cache", B, "keep decoded examples in memory after epoch 1")},
    {W("patience", I, "early stopping: epochs without improvement"), RANGE(0, BIG)},
    {ENUM("monitor", monitors, "early stopping metric: accuracy, loss or auc")},
    {W("binary", B, "sigmoid cross-entropy for 0/1 labels")},
    {.key = NULL}};
static const struct tf_with_key evaluate_with[] = {
    {W("model", S, "model bundle or checkpoint key (from train)")},
    {W("dataset", S, "dataset manifest key (from data_prep)")},
    {.key = NULL}};
static const struct tf_with_key register_with[] = {
    {W("model_name", S, "registry model name"), .rules = TF_WRULE_MODEL_NAME},
    {W("bundle", S, "model bundle key (from train)")},
    {W("metrics_from", TF_WCHECK_STEP, "upstream step whose metrics are recorded")},
    {W("tags", TF_WCHECK_STR_MAP, "tags stored with the version")},
    {.key = NULL}};
static const struct tf_with_key deploy_with[] = {
    {W("model_name", S, "registry model name"), .rules = TF_WRULE_MODEL_NAME},
    {W("version", S, "model version (from register)"), .rules = TF_WRULE_VERSION},
    {W("alias", S, "alias to point at the version, e.g. production"),
     .rules = TF_WRULE_ALIAS},
    {W("canary_percent", N, "share of traffic for the new version"),
     .rules = TF_WRULE_MIN | TF_WRULE_MAX_OPEN, .min = 0, .max = 100},
    {W("rollout_steps", TF_WCHECK_INT_LIST, "canary shares to step through, e.g. [10, 50]"),
     RANGE(1, 99)},
    {W("rollout_soak_s", N, "rollout: seconds at each share before the next move"),
     RANGE(0, 2592000)},
    {W("rollout_max_error_rate", N, "rollout: canary failure rate that rolls it back"),
     RANGE(0, 1)},
    {W("rollout_max_p99_ms", N, "rollout: canary p99 latency (ms) that rolls it back"),
     AT_LEAST(0)},
    {W("rollout_min_requests", I, "rollout: canary answers a judgement needs"), RANGE(1, 1e9)},
    {.key = NULL}};
static const struct tf_with_key shell_with[] = {
    {W("argv", TF_WCHECK_STR_LIST, "program and arguments (never a shell string)"),
     .rules = TF_WRULE_NONEMPTY},
    {W("env", TF_WCHECK_STR_MAP, "extra environment variables"), .rules = TF_WRULE_ENV_NAMES},
    {W("outputs", TF_WCHECK_STR_LIST, "names of outputs the program writes"),
     .rules = TF_WRULE_UNIQUE},
    {W("metrics", TF_WCHECK_STR_LIST, "names of metrics the program writes"),
     .rules = TF_WRULE_UNIQUE},
    {.key = NULL}};
/* clang-format on */
#undef W
#undef ENUM
#undef RANGE
#undef AT_LEAST
#undef ABOVE
#undef BIG
#undef I
#undef N
#undef S
#undef B

static const char *const no_names[] = {NULL};
static const char *const data_prep_out[] = {"dataset", NULL};
static const char *const data_prep_met[] = {"examples", NULL};
static const char *const train_out[] = {"checkpoint", "bundle", NULL};
static const char *const train_met[] = {
    "loss",           "accuracy",    "auc",        "examples_per_second",
    "device_seconds", "utilization", "input_wait", NULL};
static const char *const evaluate_met[] = {"loss", "accuracy", "auc", NULL};
static const char *const register_out[] = {"model", "version", NULL};
static const char *const deploy_out[] = {"alias", "version", NULL};

static const struct tf_step_schema schemas[TF_STEP_LAST] = {
    {TF_STEP_DATA_PREP, "data_prep", data_prep_with, data_prep_out, data_prep_met, 0},
    {TF_STEP_TRAIN, "train", train_with, train_out, train_met, 0},
    {TF_STEP_EVALUATE, "evaluate", evaluate_with, no_names, evaluate_met, 0},
    {TF_STEP_REGISTER, "register", register_with, register_out, no_names, 0},
    {TF_STEP_DEPLOY, "deploy", deploy_with, deploy_out, no_names, 0},
    {TF_STEP_SHELL, "shell", shell_with, no_names, no_names, 1},
};

const struct tf_step_schema *tf_step_schema(enum tf_step_type t)
{
	return (unsigned)t < TF_STEP_LAST ? &schemas[t] : NULL;
}

/* ---- accelerators ------------------------------------------------------------------- */

/* Checks an accelerator name and writes its canonical slice name ("v4:2x2x1" -> "v4-8").
 * The naming rules live with the slice model in accel/tpu.c. */
static int check_accelerator(const char *spec, char *canon, size_t canonlen, char *err,
                             size_t errlen)
{
	struct tf_tpu_slice sl;
	int rc = tf_tpu_slice_parse(spec, &sl, err, errlen);
	if (rc)
		return rc;
	snprintf(canon, canonlen, "%s", sl.name);
	return 0;
}

/* ---- params ------------------------------------------------------------------------- */

static int infer_param_type(const struct ynode *n, enum tf_param_type *t)
{
	long long i;
	double f;
	int b;
	if (n->kind == Y_SEQ)
		*t = TF_PARAM_LIST;
	else if (n->kind == Y_MAP)
		return -EINVAL;
	else if (is_plain(n) && !parse_bool_text(n->str, &b))
		*t = TF_PARAM_BOOL;
	else if (is_plain(n) && !parse_int_text(n->str, &i))
		*t = TF_PARAM_INT;
	else if (is_plain(n) && !parse_float_text(n->str, &f))
		*t = TF_PARAM_FLOAT;
	else
		*t = TF_PARAM_STRING;
	return 0;
}

/* Converts a YAML node to a param value of type t; NULL with a diagnostic when it does not
 * fit. */
static json_t *param_from_node(struct loader *L, const struct ynode *n, enum tf_param_type t,
                               const char *pname)
{
	long long i;
	double f;
	int b;
	if (t == TF_PARAM_LIST) {
		if (n->kind != Y_SEQ) {
			err_at(L, n, "write a list such as [1, 2, 3]",
			       "param '%s' is a list, its default must be a list", pname);
			return NULL;
		}
		json_t *arr = json_array();
		for (size_t k = 0; k < n->n; k++) {
			if (n->kids[k]->kind != Y_SCALAR) {
				err_at(L, n->kids[k], NULL,
				       "items of list param '%s' must be scalars, not %s", pname,
				       kind_name(n->kids[k]));
				json_decref(arr);
				return NULL;
			}
			json_array_append_new(arr, scalar_json(n->kids[k]));
		}
		return arr;
	}
	if (n->kind != Y_SCALAR) {
		err_at(L, n, NULL, "param '%s' is %s %s, its default cannot be %s", pname,
		       t == TF_PARAM_INT ? "an" : "a", param_type_names[t], kind_name(n));
		return NULL;
	}
	switch (t) {
	case TF_PARAM_INT:
		if (is_plain(n) && !parse_int_text(n->str, &i))
			return json_integer(i);
		break;
	case TF_PARAM_FLOAT:
		if (is_plain(n) && !parse_float_text(n->str, &f))
			return json_real(f);
		break;
	case TF_PARAM_BOOL:
		if (is_plain(n) && !parse_bool_text(n->str, &b))
			return json_boolean(b);
		break;
	default: {
		json_t *s = json_stringn(n->str, n->len);
		if (s)
			return s;
		err_at(L, n, NULL, "param '%s': the default is not valid UTF-8", pname);
		return NULL;
	}
	}
	err_at(L, n,
	       t == TF_PARAM_BOOL ? "write true or false (in YAML 1.2 yes, no, on and off are "
	                            "strings; --param accepts them as booleans)"
	                          : NULL,
	       "param '%s' is %s %s, but its default '%.40s' is not", pname,
	       t == TF_PARAM_INT ? "an" : "a", param_type_names[t], n->str);
	return NULL;
}

/* Converts --param text to type t; NULL with err set on mismatch. */
static json_t *param_from_text(const char *v, enum tf_param_type t, char *err, size_t errlen)
{
	long long i;
	double f;
	switch (t) {
	case TF_PARAM_INT:
		if (!parse_int_text(v, &i))
			return json_integer(i);
		snprintf(err, errlen, "expected an integer, got '%.40s'", v);
		return NULL;
	case TF_PARAM_FLOAT:
		if (!parse_float_text(v, &f))
			return json_real(f);
		snprintf(err, errlen, "expected a number, got '%.40s'", v);
		return NULL;
	case TF_PARAM_BOOL:
		if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1") || !strcmp(v, "on"))
			return json_true();
		if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0") || !strcmp(v, "off"))
			return json_false();
		snprintf(err, errlen, "expected true or false, got '%.40s'", v);
		return NULL;
	case TF_PARAM_LIST: {
		if (v[0] == '[') {
			json_error_t je;
			json_t *arr = json_loads(v, 0, &je);
			if (!json_is_array(arr)) {
				json_decref(arr);
				snprintf(err, errlen, "expected a JSON list such as [256,128]: %s",
				         je.text);
				return NULL;
			}
			size_t k;
			json_t *it;
			json_array_foreach(arr, k, it)
			{
				if (json_is_array(it) || json_is_object(it)) {
					json_decref(arr);
					snprintf(err, errlen, "list items must be scalars");
					return NULL;
				}
			}
			return arr;
		}
		json_t *arr = json_array();
		const char *s = v;
		while (*v) { /* "a,b,c": items typed by their looks */
			const char *comma = strchr(s, ',');
			size_t n = comma ? (size_t)(comma - s) : strlen(s);
			char *item = tf_xmalloc(n + 1);
			memcpy(item, s, n);
			item[n] = '\0';
			int b;
			if (!parse_int_text(item, &i))
				json_array_append_new(arr, json_integer(i));
			else if (!parse_float_text(item, &f))
				json_array_append_new(arr, json_real(f));
			else if (!parse_bool_text(item, &b))
				json_array_append_new(arr, json_boolean(b));
			else {
				json_t *js = json_string(item);
				if (!js) {
					free(item);
					json_decref(arr);
					snprintf(err, errlen, "the value is not valid UTF-8");
					return NULL;
				}
				json_array_append_new(arr, js);
			}
			free(item);
			if (!comma)
				break;
			s = comma + 1;
		}
		return arr;
	}
	default: {
		json_t *s = json_string(v);
		if (!s)
			snprintf(err, errlen, "the value is not valid UTF-8");
		return s;
	}
	}
}

int tf_param_override_parse(const char *arg, struct tf_param_override *out)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg)
		return -EINVAL;
	out->name = arg; /* the name runs up to the '=' (names cannot contain one) */
	out->value = eq + 1;
	return 0;
}

static void load_params(struct loader *L, const struct ynode *m)
{
	struct tf_pipeline *p = L->p;
	if (want_kind(L, m, Y_MAP, "'params'"))
		return;
	if (m->n / 2 > TF_PIPELINE_MAX_PARAMS) {
		err_at(L, m, NULL, "too many params: %zu (the limit is %d)", m->n / 2,
		       TF_PIPELINE_MAX_PARAMS);
		return;
	}
	p->params = tf_xcalloc(m->n / 2 + 1, sizeof(*p->params));
	check_keys(L, m, NULL, "'params'");
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const struct ynode *k = m->kids[i], *v = m->kids[i + 1];
		if (k->kind != Y_SCALAR)
			continue;
		if (!valid_name(k->str)) {
			err_at(L, k, name_hint(k->str), "bad param name '%.60s'", k->str);
			continue;
		}
		if (tf_pipeline_param(p, k->str))
			continue; /* duplicate, reported by check_keys */
		struct tf_param *par = &p->params[p->nparams];
		memset(par, 0, sizeof(*par));
		par->name = tf_xstrdup(k->str);
		par->line = k->line;
		par->col = k->col;
		par->type = TF_PARAM_STRING;
		const struct ynode *def = NULL;
		if (v->kind == Y_MAP) {
			static const char *const keys[] = {"type", "default", "description", NULL};
			char what[100];
			snprintf(what, sizeof(what), "param '%s'", k->str);
			check_keys(L, v, keys, what);
			const struct ynode *t = map_get(v, "type");
			def = map_get(v, "default");
			int ti;
			if (t && !get_enum(L, t, "param type", param_type_names, &ti))
				par->type = (enum tf_param_type)ti;
			else if (!t && def && infer_param_type(def, &par->type))
				par->type = TF_PARAM_STRING;
			const struct ynode *desc = map_get(v, "description");
			if (desc)
				par->description = get_string(L, desc, "a param's 'description'");
		} else {
			def = v; /* shorthand: `epochs: 12` declares an int with that default */
			infer_param_type(v, &par->type);
		}
		if (def && !scalar_null(def))
			par->default_value = param_from_node(L, def, par->type, par->name);
		if (json_is_number(par->default_value))
			par->text = tf_xstrdup(def->str);
		par->value = par->default_value ? json_incref(par->default_value) : NULL;
		p->nparams++;
	}
}

static void apply_overrides(struct loader *L, const struct tf_param_override *ov, size_t nov)
{
	struct tf_pipeline *p = L->p;
	for (size_t i = 0; i < nov; i++) {
		size_t nlen = strcspn(ov[i].name, "=");
		char *name = tf_xmalloc(nlen + 1);
		memcpy(name, ov[i].name, nlen);
		name[nlen] = '\0';
		struct tf_param *par = (struct tf_param *)tf_pipeline_param(p, name);
		if (!par) {
			const char **names = tf_xcalloc(p->nparams + 1, sizeof(*names));
			for (size_t k = 0; k < p->nparams; k++)
				names[k] = p->params[k].name;
			const char *near = tf_diag_suggest(name, names);
			char hint[128];
			if (near)
				snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
			else
				snprintf(hint, sizeof(hint), "declare it under 'params'");
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, 0, 0, hint,
			            "--param %s: the pipeline has no param '%s'", name, name);
			free(names);
			free(name);
			continue;
		}
		char err[200];
		json_t *v = param_from_text(ov[i].value, par->type, err, sizeof(err));
		if (!v) {
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, 0, 0, NULL,
			            "--param %s: param '%s' is %s %s: %s", name, name,
			            par->type == TF_PARAM_INT ? "an" : "a",
			            param_type_names[par->type], err);
		} else {
			json_decref(par->value);
			par->value = v;
			par->overridden = 1;
			free(par->text);
			par->text = json_is_number(v) ? tf_xstrdup(ov[i].value) : NULL;
		}
		free(name);
	}
	if (L->flags & TF_PIPELINE_ALLOW_UNSET)
		return;
	for (size_t i = 0; i < p->nparams; i++)
		if (!p->params[i].value)
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, p->params[i].line,
			            p->params[i].col,
			            "give it a 'default' or pass --param NAME=VALUE",
			            "param '%s' has no value", p->params[i].name);
}

/* ---- retries, defaults -------------------------------------------------------------- */

static void builtin_retries(struct tf_retry_policy *r)
{
	r->limit = 0;
	r->backoff = 10;
	r->factor = 2;
	r->max_backoff = 600;
	r->on = (1u << TF_FAILURE_LAST) - 1;
}

static void load_retries(struct loader *L, const struct ynode *n, struct tf_retry_policy *r)
{
	long long v;
	if (n->kind == Y_SCALAR) { /* shorthand: `retries: 3` */
		if (!get_int(L, n, "'retries'", 0, 1000, &v))
			r->limit = (int)v;
		return;
	}
	if (want_kind(L, n, Y_MAP, "'retries'"))
		return;
	static const char *const keys[] = {"limit", "backoff", "factor", "max_backoff", "on", NULL};
	check_keys(L, n, keys, "'retries'");
	const struct ynode *x;
	if ((x = map_get(n, "limit")) && !get_int(L, x, "'retries.limit'", 0, 1000, &v))
		r->limit = (int)v;
	if ((x = map_get(n, "backoff")))
		get_duration(L, x, "'retries.backoff'", &r->backoff);
	if ((x = map_get(n, "factor")))
		get_number(L, x, "'retries.factor'", 1, &r->factor);
	if ((x = map_get(n, "max_backoff")))
		get_duration(L, x, "'retries.max_backoff'", &r->max_backoff);
	if ((x = map_get(n, "on"))) {
		unsigned on = 0;
		int c;
		if (x->kind == Y_SCALAR) {
			if (!get_enum(L, x, "failure class", failure_names, &c))
				on |= 1u << c;
		} else if (!want_kind(L, x, Y_SEQ, "'retries.on'")) {
			for (size_t i = 0; i < x->n; i++)
				if (!get_enum(L, x->kids[i], "failure class", failure_names, &c))
					on |= 1u << c;
		}
		r->on = on;
	}
}

/* ---- executor: slurm ----------------------------------------------------------------- */

#define SLURM_MAX_ARGS 32

/* A Slurm name (partition, account, qos): printable, no spaces, at most 128 bytes. */
static char *get_slurm_name(struct loader *L, const struct ynode *n, const char *what)
{
	char *v = get_string(L, n, what);
	if (!v)
		return NULL;
	int ok = v[0] && strlen(v) <= 128;
	for (const char *c = v; ok && *c; c++)
		ok = isgraph((unsigned char)*c) && *c != ',';
	if (!ok) {
		err_at(L, n, "a Slurm name has no spaces or commas", "bad %s '%.60s'", what, v);
		free(v);
		return NULL;
	}
	return v;
}

static void slurm_opts_free(struct tf_slurm_opts *o)
{
	free(o->partition);
	free(o->account);
	free(o->qos);
	for (size_t i = 0; i < o->nargs; i++)
		free(o->args[i]);
	free(o->args);
	memset(o, 0, sizeof(*o));
}

/* Reads a `slurm:` mapping over *o (keys it gives replace what o had). */
static void load_slurm(struct loader *L, const struct ynode *m, struct tf_slurm_opts *o)
{
	static const char *const keys[] = {"partition", "account", "qos", "args", NULL};
	if (want_kind(L, m, Y_MAP, "'slurm'"))
		return;
	check_keys(L, m, keys, "'slurm'");
	const struct ynode *x;
	char **fields[] = {&o->partition, &o->account, &o->qos};
	for (size_t i = 0; i < 3; i++)
		if ((x = map_get(m, keys[i]))) {
			char what[32];
			snprintf(what, sizeof(what), "'slurm.%s'", keys[i]);
			char *v = get_slurm_name(L, x, what);
			if (v) {
				free(*fields[i]);
				*fields[i] = v;
			}
		}
	if ((x = map_get(m, "args")) && !want_kind(L, x, Y_SEQ, "'slurm.args'")) {
		if (x->n > SLURM_MAX_ARGS) {
			err_at(L, x, NULL, "'slurm.args' has %zu items (the limit is %d)", x->n,
			       SLURM_MAX_ARGS);
			return;
		}
		for (size_t i = 0; i < o->nargs; i++)
			free(o->args[i]);
		free(o->args);
		o->args = tf_xcalloc(x->n + 1, sizeof(char *));
		o->nargs = 0;
		for (size_t i = 0; i < x->n; i++) {
			const struct ynode *a = x->kids[i];
			if (want_kind(L, a, Y_SCALAR, "an item of 'slurm.args'"))
				continue;
			if (a->str[0] != '-' || strchr(a->str, '\n') || strlen(a->str) > 256) {
				err_at(L, a,
				       "write sbatch options such as '--constraint=tpu' or "
				       "'--mem=8G'",
				       "'slurm.args' item '%.60s' is not an sbatch option", a->str);
				continue;
			}
			o->args[o->nargs++] = tf_xstrdup(a->str);
		}
	}
}

static void slurm_opts_copy(struct tf_slurm_opts *to, const struct tf_slurm_opts *from)
{
	to->partition = from->partition ? tf_xstrdup(from->partition) : NULL;
	to->account = from->account ? tf_xstrdup(from->account) : NULL;
	to->qos = from->qos ? tf_xstrdup(from->qos) : NULL;
	to->nargs = from->nargs;
	to->args = from->nargs ? tf_xcalloc(from->nargs + 1, sizeof(char *)) : NULL;
	for (size_t i = 0; i < from->nargs; i++)
		to->args[i] = tf_xstrdup(from->args[i]);
}

int tf_storage_shared(const char *url)
{
	if (!url)
		return 0;
	if (!strncmp(url, "s3://", 5))
		return 1;
	const char *path = !strncmp(url, "file://", 7) ? url + 7 : url;
	const char *shared = getenv("TPUFLOW_SHARED_STORAGE");
	if (!shared || path[0] != '/')
		return 0;
	char *list = tf_xstrdup(shared), *save = NULL;
	int ok = 0;
	for (char *d = strtok_r(list, ":", &save); d && !ok; d = strtok_r(NULL, ":", &save)) {
		size_t n = strlen(d);
		while (n > 1 && d[n - 1] == '/')
			d[--n] = '\0';
		ok = n && !strncmp(path, d, n) && (path[n] == '/' || !path[n] || n == 1);
	}
	free(list);
	return ok;
}

/* Steps on Slurm run on other machines: the run's storage must be one they all reach. */
static void check_slurm_storage(struct loader *L, const struct ynode *at, const char *what)
{
	const char *u = L->p->storage;
	if (tf_storage_shared(u))
		return;
	err_at(L, at,
	       "add 'storage: s3://BUCKET/PREFIX' to the pipeline, or list the shared directory of "
	       "a file:// storage in TPUFLOW_SHARED_STORAGE (docs/slurm.md)",
	       "%s runs on Slurm, but the run's storage %s%.80s%s is not one every node can reach",
	       what, u ? "'" : "", u ? u : "(the state home's objects/)", u ? "'" : "");
}

/* `priority` (0..9) and `project` (a name) of map m, where given: the scheduling class of
 * train slices. `what` prefixes the key in messages ("'defaults." or "'"). */
static void load_class(struct loader *L, const struct ynode *m, const char *what, int *priority,
                       char **project)
{
	const struct ynode *x;
	char key[64];
	long long v;
	snprintf(key, sizeof(key), "%spriority'", what);
	if ((x = map_get(m, "priority")) && !get_int(L, x, key, 0, 9, &v))
		*priority = (int)v;
	snprintf(key, sizeof(key), "%sproject'", what);
	char *pr = (x = map_get(m, "project")) ? get_string(L, x, key) : NULL;
	if (pr && !valid_name(pr)) {
		err_at(L, x, name_hint(pr), "bad project name '%.60s'", pr);
		free(pr);
	} else if (pr) {
		free(*project);
		*project = pr;
	}
}

static void load_defaults(struct loader *L, const struct ynode *m)
{
	struct tf_step_defaults *d = &L->p->defaults;
	if (want_kind(L, m, Y_MAP, "'defaults'"))
		return;
	static const char *const keys[] = {"retries", "timeout",  "executor", "cache",
	                                   "slurm",   "priority", "project",  NULL};
	check_keys(L, m, keys, "'defaults'");
	const struct ynode *x;
	int e;
	if ((x = map_get(m, "retries")))
		load_retries(L, x, &d->retries);
	if ((x = map_get(m, "timeout")))
		get_duration(L, x, "'timeout'", &d->timeout);
	if ((x = map_get(m, "executor")) && !get_enum(L, x, "executor", executor_names, &e)) {
		d->executor = (enum tf_executor_kind)e;
		d->has_executor = 1;
		L->defaults_executor = x;
	}
	if ((x = map_get(m, "slurm")))
		load_slurm(L, x, &d->slurm);
	if ((x = map_get(m, "cache")) && !get_bool(L, x, "'cache'", &d->cache))
		d->has_cache = 1;
	load_class(L, m, "'defaults.", &d->priority, &d->project);
}

/* ---- steps -------------------------------------------------------------------------- */

static const char *const step_keys[] = {"name",     "type",     "needs",        "with",
                                        "when",     "retries",  "timeout",      "accelerator",
                                        "executor", "cache",    "cache_inputs", "description",
                                        "slurm",    "priority", "project",      NULL};

/* `cache_inputs: [files]`: paths relative to the pipeline file's directory, made absolute so
 * a resume from another directory hashes the same files. */
static void load_cache_inputs(struct loader *L, struct tf_step *s, const struct ynode *v,
                              const char *what)
{
	if (want_kind(L, v, Y_SEQ, "'cache_inputs'"))
		return;
	if (!s->cache) {
		err_at(L, v, "add 'cache: true' to the step",
		       "%s: 'cache_inputs' has no effect on a step that is not cached", what);
		return;
	}
	char *dir = tf_xstrdup(L->p->path ? L->p->path : ".");
	char *slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir ? 1 : 0] = '\0';
	else
		snprintf(dir, strlen(dir) + 1, ".");
	char *absdir = realpath(dir, NULL);
	s->cache_inputs = tf_xcalloc(v->n + 1, sizeof(char *));
	for (size_t i = 0; i < v->n; i++) {
		const struct ynode *it = v->kids[i];
		if (want_kind(L, it, Y_SCALAR, "an item of 'cache_inputs'"))
			continue;
		if (!it->str[0] || memchr(it->str, '\0', it->len)) {
			err_at(L, it, "name a file, relative to the pipeline file's directory",
			       "%s: empty or binary path in 'cache_inputs'", what);
			continue;
		}
		s->cache_inputs[s->ncache_inputs++] =
		    it->str[0] == '/' ? tf_xstrdup(it->str)
		                      : tf_xasprintf("%s/%s", absdir ? absdir : dir, it->str);
	}
	free(absdir);
	free(dir);
}

static void load_step(struct loader *L, size_t idx, const struct ynode *m)
{
	struct tf_pipeline *p = L->p;
	struct tf_step *s = &p->steps[idx];
	struct stepx *x = &L->sx[idx];
	x->node = m;
	s->line = m->line;
	s->col = m->col;
	s->retries = p->defaults.retries;
	s->timeout = p->defaults.timeout;
	s->cache = p->defaults.cache;
	s->priority = p->defaults.priority;
	s->project = p->defaults.project ? tf_xstrdup(p->defaults.project) : NULL;
	if (want_kind(L, m, Y_MAP, "a step"))
		return;
	const struct ynode *n = map_get(m, "name");
	char what[100];
	if (n && n->kind == Y_SCALAR)
		snprintf(what, sizeof(what), "step '%.60s'", n->str);
	else
		snprintf(what, sizeof(what), "step %zu", idx + 1);
	check_keys(L, m, step_keys, what);
	int name_ok = 0, type_ok = 0, t;
	if (!n) {
		err_at(L, m, "add 'name: NAME'", "%s has no 'name'", what);
	} else if (!want_kind(L, n, Y_SCALAR, "a step's 'name'")) {
		if (!valid_name(n->str)) {
			err_at(L, n, name_hint(n->str), "bad step name '%.60s'", n->str);
		} else {
			s->name = tf_xstrdup(n->str);
			s->line = n->line;
			s->col = n->col;
			x->name_node = n;
			name_ok = 1;
		}
	}
	const struct ynode *ty = map_get(m, "type");
	if (!ty)
		err_at(L, m, "add 'type:' (data_prep, train, evaluate, register, deploy or shell)",
		       "%s has no 'type'", what);
	else if (!get_enum(L, ty, "step type", step_type_names, &t)) {
		s->type = (enum tf_step_type)t;
		type_ok = 1;
	}
	x->ok = name_ok && type_ok;

	const struct ynode *v;
	if ((v = map_get(m, "retries")))
		load_retries(L, v, &s->retries);
	if ((v = map_get(m, "timeout")))
		get_duration(L, v, "'timeout'", &s->timeout);
	int cache_set = 0;
	if ((v = map_get(m, "cache")) && !get_bool(L, v, "'cache'", &s->cache))
		cache_set = 1;
	/* A shell step runs a program whose own files the cache key cannot see (edit the script
	 * and the key stays the same): it is cached only when asked. */
	if (type_ok && s->type == TF_STEP_SHELL && !cache_set && !p->defaults.has_cache)
		s->cache = 0;
	if ((v = map_get(m, "cache_inputs")))
		load_cache_inputs(L, s, v, what);
	/* A shell step runs a program: `defaults.executor: inprocess` does not apply to it (it
	 * stays `local`); saying `executor: inprocess` on the step itself is an error. */
	/* register and deploy write the registry: they stay in the coordinator, whatever
	 * `defaults.executor` says; naming `executor: slurm` on one is an error. */
	int e = TF_EXECUTOR_INPROCESS;
	int coord_only = type_ok && (s->type == TF_STEP_REGISTER || s->type == TF_STEP_DEPLOY);
	const struct ynode *exec_at = L->defaults_executor;
	if (p->defaults.has_executor)
		e = p->defaults.executor;
	if (coord_only && e == TF_EXECUTOR_SLURM)
		e = TF_EXECUTOR_INPROCESS;
	if (type_ok && s->type == TF_STEP_SHELL && e == TF_EXECUTOR_INPROCESS)
		e = TF_EXECUTOR_LOCAL;
	if ((v = map_get(m, "executor")) && !get_enum(L, v, "executor", executor_names, &e)) {
		exec_at = v;
		if (coord_only && e == TF_EXECUTOR_SLURM)
			err_at(
			    L, v, "leave 'executor' out: register and deploy run in tpuflow itself",
			    "%s: a %s step cannot run on Slurm", what, tf_step_type_name(s->type));
		else if (type_ok && s->type == TF_STEP_SHELL && e == TF_EXECUTOR_INPROCESS)
			err_at(L, v, "set 'executor: local' on this step (or leave 'executor' out)",
			       "%s: a shell step runs a program and cannot use the inprocess "
			       "executor",
			       what);
	}
	s->executor = (enum tf_executor_kind)e;
	if (e == TF_EXECUTOR_SLURM) {
		slurm_opts_copy(&s->slurm, &p->defaults.slurm);
		if ((v = map_get(m, "slurm")))
			load_slurm(L, v, &s->slurm);
		check_slurm_storage(L, exec_at ? exec_at : m, what);
	} else if ((v = map_get(m, "slurm"))) {
		err_at(L, v, "add 'executor: slurm' to the step, or remove 'slurm:'",
		       "%s: 'slurm' applies only to steps with 'executor: slurm'", what);
	}
	if ((v = map_get(m, "accelerator")) && !want_kind(L, v, Y_SCALAR, "'accelerator'")) {
		char canon[64], err[256];
		if (check_accelerator(v->str, canon, sizeof(canon), err, sizeof(err)))
			err_at(L, v, NULL, "%s", err);
		else
			s->accelerator = tf_xstrdup(canon);
	}
	if ((v = map_get(m, "description")))
		want_kind(L, v, Y_SCALAR, "a step's 'description'");
	load_class(L, m, "'", &s->priority, &s->project);
	if ((v = map_get(m, "with")) && !want_kind(L, v, Y_MAP, "'with'"))
		x->with_node = v;
	if ((v = map_get(m, "when")) && !want_kind(L, v, Y_SCALAR, "'when'")) {
		x->when_node = v;
		s->when_source = tf_xstrdup(v->str);
	}
}

/* Declared outputs and metrics: the schema's, or for shell the names under with.outputs /
 * with.metrics. */
static void declare_outputs(struct loader *L, size_t idx)
{
	struct tf_step *s = &L->p->steps[idx];
	const struct tf_step_schema *sc = tf_step_schema(s->type);
	const char *const *lists[2] = {sc->outputs, sc->metrics};
	char ***dst[2] = {&s->outputs, &s->metrics};
	size_t *ndst[2] = {&s->noutputs, &s->nmetrics};
	for (int k = 0; k < 2; k++) {
		if (!sc->dynamic) {
			size_t n = 0;
			while (lists[k][n])
				n++;
			*dst[k] = tf_xcalloc(n + 1, sizeof(char *));
			for (size_t i = 0; i < n; i++)
				(*dst[k])[i] = tf_xstrdup(lists[k][i]);
			*ndst[k] = n;
			continue;
		}
		const struct ynode *l = map_get(L->sx[idx].with_node, k ? "metrics" : "outputs");
		*dst[k] = tf_xcalloc((l && l->kind == Y_SEQ ? l->n : 0) + 1, sizeof(char *));
		if (!l || l->kind != Y_SEQ)
			continue;
		for (size_t i = 0; i < l->n; i++) {
			const struct ynode *it = l->kids[i];
			if (it->kind != Y_SCALAR)
				continue; /* reported by the with checks */
			if (!valid_name(it->str)) {
				err_at(L, it, "use letters, digits, '_' and '-'",
				       "bad %s name '%.60s'", k ? "metric" : "output", it->str);
				continue;
			}
			(*dst[k])[(*ndst[k])++] = tf_xstrdup(it->str);
		}
	}
}

/* The step name nearest to `word`, other than step `self`. */
static const char *suggest_step(const struct loader *L, const char *word, size_t self)
{
	const struct tf_pipeline *p = L->p;
	const char **names = tf_xcalloc(p->nsteps + 1, sizeof(*names));
	size_t nn = 0;
	for (size_t i = 0; i < p->nsteps; i++)
		if (p->steps[i].name && i != self)
			names[nn++] = p->steps[i].name;
	const char *near = tf_diag_suggest(word, names);
	free(names);
	return near;
}

static void resolve_needs(struct loader *L, size_t idx, const struct ynode *needs)
{
	struct tf_pipeline *p = L->p;
	struct tf_step *s = &p->steps[idx];
	struct stepx *x = &L->sx[idx];
	const struct ynode *const *items = NULL;
	size_t n = 0;
	if (needs->kind == Y_SCALAR) { /* `needs: prep` is a one-item list */
		items = &needs;
		n = 1;
	} else if (!want_kind(L, needs, Y_SEQ, "'needs'")) {
		items = (const struct ynode *const *)needs->kids;
		n = needs->n;
	}
	s->needs = tf_xcalloc(n + 1, sizeof(size_t));
	x->need_nodes = tf_xcalloc(n + 1, sizeof(*x->need_nodes));
	for (size_t i = 0; i < n; i++) {
		const struct ynode *it = items[i];
		if (want_kind(L, it, Y_SCALAR, "an item of 'needs'")) {
			L->dag_ok = 0;
			continue;
		}
		int j = step_lookup(L, it->str);
		if (j < 0) {
			const char *near = diag_room(L) ? suggest_step(L, it->str, idx) : NULL;
			char hint[128];
			if (near)
				snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
			else
				snprintf(hint, sizeof(hint), "'needs' lists names of other steps");
			err_at(L, it, hint, "step '%s' needs unknown step '%.60s'", s->name,
			       it->str);
			L->dag_ok = 0;
			continue;
		}
		int dup = 0;
		for (size_t k = 0; k < s->nneeds; k++)
			if (s->needs[k] == (size_t)j)
				dup = 1;
		if (dup) {
			err_at(L, it, "remove the repeated entry", "step '%s' needs '%s' twice",
			       s->name, it->str);
			continue;
		}
		x->need_nodes[s->nneeds] = it;
		s->needs[s->nneeds++] = (size_t)j;
	}
}

/* Cycle search: iterative DFS (no recursion on hostile input) with colours; each back edge
 * found is reported once with the cycle spelled out. */
static void find_cycles(struct loader *L)
{
	struct tf_pipeline *p = L->p;
	size_t n = p->nsteps;
	unsigned char *color = tf_xcalloc(n + 1, 1); /* 0 new, 1 on stack, 2 done */
	size_t *stack = tf_xcalloc(n + 1, sizeof(size_t));
	size_t *edge = tf_xcalloc(n + 1, sizeof(size_t));
	for (size_t root = 0; root < n; root++) {
		if (color[root])
			continue;
		size_t sp = 0;
		stack[sp] = root;
		edge[sp] = 0;
		color[root] = 1;
		sp++;
		while (sp) {
			size_t u = stack[sp - 1];
			if (edge[sp - 1] >= p->steps[u].nneeds) {
				color[u] = 2;
				sp--;
				continue;
			}
			size_t ei = edge[sp - 1]++;
			size_t v = p->steps[u].needs[ei];
			if (color[v] == 0) {
				color[v] = 1;
				stack[sp] = v;
				edge[sp] = 0;
				sp++;
			} else if (color[v] == 1 && !diag_room(L)) {
				L->dag_ok = 0;
			} else if (color[v] == 1) {
				/* stack holds v ... u; u needs v: the cycle runs v -> ... -> u -> v
				 * in "needs" direction; print it in run order starting at v */
				size_t first = sp;
				while (first > 0 && stack[first - 1] != v)
					first--;
				first--;
				size_t cap = 64;
				char *buf = tf_xmalloc(cap);
				size_t len = 0;
				buf[0] = '\0';
				for (size_t k = sp; k-- > first;) {
					if (sp - first > 12 && k < sp - 6 && k > first + 4) {
						if (k ==
						    sp -
						        7) { /* long cycles: the ends and a count */
							char mid[48];
							int w = snprintf(mid, sizeof(mid),
							                 "... (%zu more) -> ",
							                 sp - first - 11);
							if (len + (size_t)w + 1 > cap) {
								cap = (len + (size_t)w + 1) * 2;
								buf = tf_xrealloc(buf, cap);
							}
							memcpy(buf + len, mid, (size_t)w + 1);
							len += (size_t)w;
						}
						continue;
					}
					const char *nm = p->steps[stack[k]].name;
					size_t need = len + strlen(nm) + 5;
					if (need > cap) {
						cap = need * 2;
						buf = tf_xrealloc(buf, cap);
					}
					len += (size_t)sprintf(buf + len, "%s -> ", nm);
				}
				const char *nm = p->steps[u].name;
				if (len + strlen(nm) + 1 > cap)
					buf = tf_xrealloc(buf, len + strlen(nm) + 1);
				strcpy(buf + len, nm);
				err_at(
				    L, L->sx[u].need_nodes[ei],
				    "a step cannot depend on itself, directly or through others; "
				    "remove one of these needs",
				    "dependency cycle: %s", buf);
				free(buf);
				L->dag_ok = 0;
			}
		}
	}
	free(color);
	free(stack);
	free(edge);
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	return (x > y) - (x < y);
}

/* Levels, topological order and transitive upstream sets (only for a sound DAG). */
static void compute_order(struct loader *L)
{
	struct tf_pipeline *p = L->p;
	size_t n = p->nsteps;
	/* Kahn's algorithm by levels: a step's level is 1 + the highest level of its needs. */
	size_t *indeg = tf_xcalloc(n + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		indeg[i] = p->steps[i].nneeds;
	size_t *order = tf_xcalloc(n + 1, sizeof(size_t));
	size_t done = 0;
	int level = 0;
	/* dependents lists */
	size_t *cnt = tf_xcalloc(n + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < p->steps[i].nneeds; k++)
			cnt[p->steps[i].needs[k]]++;
	size_t **deps = tf_xcalloc(n + 1, sizeof(size_t *));
	size_t *fill = tf_xcalloc(n + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		deps[i] = tf_xcalloc(cnt[i] + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < p->steps[i].nneeds; k++) {
			size_t j = p->steps[i].needs[k];
			deps[j][fill[j]++] = i;
		}
	size_t lvl_start = 0;
	for (size_t i = 0; i < n; i++)
		if (!indeg[i]) {
			p->steps[i].level = 0;
			order[done++] = i;
		}
	while (lvl_start < done) {
		size_t lvl_end = done;
		for (size_t a = lvl_start; a < lvl_end; a++) {
			size_t u = order[a];
			for (size_t k = 0; k < cnt[u]; k++) {
				size_t v = deps[u][k];
				if (--indeg[v] == 0) {
					p->steps[v].level = level + 1;
					order[done++] = v;
				}
			}
		}
		/* keep file order within a level */
		qsort(order + lvl_end, done - lvl_end, sizeof(size_t), cmp_size);
		lvl_start = lvl_end;
		if (lvl_start < done)
			level++;
	}
	p->topo = order;
	p->nlevels = n ? level + 1 : 0;
	L->words = (n + 63) / 64;
	L->upstream = tf_xcalloc(n * L->words + 1, sizeof(uint64_t));
	for (size_t a = 0; a < n; a++) {
		size_t u = order[a];
		uint64_t *up = L->upstream + u * L->words;
		for (size_t k = 0; k < p->steps[u].nneeds; k++) {
			size_t j = p->steps[u].needs[k];
			const uint64_t *uj = L->upstream + j * L->words;
			for (size_t w = 0; w < L->words; w++)
				up[w] |= uj[w];
			up[j / 64] |= 1ull << (j % 64);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(deps[i]);
	free(deps);
	free(fill);
	free(cnt);
	free(indeg);
}

static int is_upstream(const struct loader *L, size_t step, size_t of)
{
	return (L->upstream[step * L->words + of / 64] >> (of % 64)) & 1;
}

/* ---- references and `with` ---------------------------------------------------------- */

static const char **names_of_params(const struct tf_pipeline *p)
{
	const char **names = tf_xcalloc(p->nparams + 1, sizeof(*names));
	for (size_t i = 0; i < p->nparams; i++)
		names[i] = p->params[i].name;
	return names;
}

/* Checks one reference from step L->cur_step; resolves step_index. Returns the static type,
 * or TF_VT_LAST when it is bad (and reported). */
static enum tf_vtype check_ref(struct loader *L, struct tf_ref *r)
{
	struct tf_pipeline *p = L->p;
	const struct tf_step *self = &p->steps[L->cur_step];
	char hint[160];
	if (r->kind == TF_REF_PARAM) {
		const struct tf_param *par = tf_pipeline_param(p, r->name);
		if (!par) {
			const char **names = names_of_params(p);
			const char *near = diag_room(L) ? tf_diag_suggest(r->name, names) : NULL;
			if (near)
				snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
			else
				snprintf(hint, sizeof(hint), "declare it under 'params'");
			tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, hint,
			            "unknown param '%s' in '${%s}'", r->name, r->path);
			free(names);
			return TF_VT_LAST;
		}
		switch (par->type) {
		case TF_PARAM_INT:
		case TF_PARAM_FLOAT:
			return TF_VT_NUMBER;
		case TF_PARAM_BOOL:
			return TF_VT_BOOL;
		case TF_PARAM_LIST:
			return TF_VT_LIST;
		default:
			return TF_VT_STRING;
		}
	}
	int j = step_lookup(L, r->step);
	if (j < 0) {
		const char *near = diag_room(L) ? suggest_step(L, r->step, p->nsteps) : NULL;
		if (near)
			snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
		else
			snprintf(hint, sizeof(hint), "refer to a step declared in this pipeline");
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, hint,
		            "unknown step '%s' in '${%s}'", r->step, r->path);
		return TF_VT_LAST;
	}
	r->step_index = j;
	const struct tf_step *src = &p->steps[j];
	if (!L->sx[j].ok)
		return TF_VT_LAST; /* the step itself is broken and reported */
	if ((size_t)j == L->cur_step) {
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col,
		            "a step's outputs exist only after it ran; use them in a later step",
		            "step '%s' refers to its own %s in '${%s}'", self->name,
		            r->kind == TF_REF_OUTPUT ? "outputs" : "metrics", r->path);
		return TF_VT_LAST;
	}
	char **decl = r->kind == TF_REF_OUTPUT ? src->outputs : src->metrics;
	size_t ndecl = r->kind == TF_REF_OUTPUT ? src->noutputs : src->nmetrics;
	int found = 0;
	for (size_t i = 0; i < ndecl; i++)
		if (!strcmp(decl[i], r->name))
			found = 1;
	if (!found) {
		const char *near = tf_diag_suggest(r->name, (const char *const *)decl);
		const char *kind = r->kind == TF_REF_OUTPUT ? "output" : "metric";
		if (near) {
			snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
		} else if (!ndecl) {
			snprintf(hint, sizeof(hint), "a '%s' step has no %ss%s",
			         tf_step_type_name(src->type), kind,
			         src->type == TF_STEP_SHELL ? "; declare them under its with" : "");
		} else {
			size_t off = (size_t)snprintf(hint, sizeof(hint), "its %ss:", kind);
			for (size_t i = 0; i < ndecl && off < sizeof(hint); i++)
				off += (size_t)snprintf(hint + off, sizeof(hint) - off, "%s %s",
				                        i ? "," : "", decl[i]);
		}
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, hint,
		            "step '%s' (%s) has no %s '%s'", src->name,
		            tf_step_type_name(src->type), kind, r->name);
		return TF_VT_LAST;
	}
	if (L->dag_ok && !is_upstream(L, L->cur_step, (size_t)j)) {
		snprintf(hint, sizeof(hint), "add '%s' to the needs of '%s'", src->name,
		         self->name);
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, r->line, r->col, hint,
		            "step '%s' uses '${%s}' but does not depend on step '%s'", self->name,
		            r->path, src->name);
		return TF_VT_LAST;
	}
	return r->kind == TF_REF_METRIC ? TF_VT_NUMBER : TF_VT_ANY;
}

static enum tf_vtype ref_type_cb(void *ctx, const struct tf_ref *r)
{
	return check_ref(ctx, (struct tf_ref *)r);
}

/* Is the scalar's text exactly its column span on one line (so offsets map to columns)?
 * Returns the column of its first character via *col. */
static int scalar_exact(const struct ynode *n, int *col)
{
	*col = n->col;
	if (n->kind != Y_SCALAR || n->line != n->end_line)
		return 0;
	size_t chars = 0;
	for (size_t i = 0; i < n->len; i++)
		if (((unsigned char)n->str[i] & 0xC0) != 0x80)
			chars++;
	int quoted = n->style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
	             n->style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
	if (n->style != YAML_PLAIN_SCALAR_STYLE && !quoted)
		return 0;
	if ((size_t)(n->end_col - n->col) != chars + (quoted ? 2 : 0))
		return 0;
	*col = n->col + quoted;
	return 1;
}

/* Parses a `with` value (recursively), checking references. */
static void load_with_value(struct loader *L, const struct ynode *n, struct tf_with_value *w)
{
	w->line = n->line;
	w->col = n->col;
	if (n->kind == Y_SCALAR) {
		w->kind = TF_WITH_SCALAR;
		w->plain = is_plain(n);
		int col, exact = scalar_exact(n, &col);
		tf_template_parse(n->str, L->file, n->line, col, exact, &w->tmpl, L->d);
		for (size_t i = 0; i < w->tmpl.nparts; i++)
			if (w->tmpl.parts[i].ref)
				check_ref(L, w->tmpl.parts[i].ref);
		return;
	}
	w->kind = n->kind == Y_SEQ ? TF_WITH_LIST : TF_WITH_MAP;
	size_t cnt = n->kind == Y_SEQ ? n->n : n->n / 2;
	w->items = tf_xcalloc(cnt + 1, sizeof(*w->items));
	if (n->kind == Y_MAP)
		check_keys(L, n, NULL, "a 'with' mapping");
	for (size_t i = 0; i < cnt; i++) {
		const struct ynode *v = n->kind == Y_SEQ ? n->kids[i] : n->kids[2 * i + 1];
		if (n->kind == Y_MAP) {
			const struct ynode *k = n->kids[2 * i];
			w->items[w->nitems].key = tf_xstrdup(k->kind == Y_SCALAR ? k->str : "");
		}
		load_with_value(L, v, &w->items[w->nitems++]);
	}
}

/* Values of text-typed keys (argv, env, tags, names) are passed on as written: `1.10`, `012`
 * and `~` stay those characters instead of becoming 1.1000000000000001, 12 and null. */
static void keep_source_text(struct tf_with_value *w)
{
	w->plain = 0;
	for (size_t i = 0; i < w->nitems; i++)
		keep_source_text(&w->items[i]);
}

static enum tf_vtype ref_static_type(struct loader *L, const struct tf_ref *r)
{
	if (r->kind == TF_REF_PARAM) {
		const struct tf_param *par = tf_pipeline_param(L->p, r->name);
		if (!par)
			return TF_VT_LAST;
		switch (par->type) {
		case TF_PARAM_INT:
		case TF_PARAM_FLOAT:
			return TF_VT_NUMBER;
		case TF_PARAM_BOOL:
			return TF_VT_BOOL;
		case TF_PARAM_LIST:
			return TF_VT_LIST;
		default:
			return TF_VT_STRING;
		}
	}
	return r->kind == TF_REF_METRIC ? TF_VT_NUMBER : TF_VT_ANY;
}

/* The bounds of a schema row in words: "at least 1", "between 0 and 100", "greater than 0
 * and less than 1". */
static void range_text(const struct tf_with_key *wk, char *buf, size_t len)
{
	unsigned r = wk->rules;
	if ((r & TF_WRULE_MIN) && (r & TF_WRULE_MAX)) {
		snprintf(buf, len, "between %.15g and %.15g", wk->min, wk->max);
		return;
	}
	int n = 0;
	buf[0] = '\0';
	if (r & (TF_WRULE_MIN | TF_WRULE_MIN_OPEN))
		n = snprintf(buf, len, "%s %.15g", r & TF_WRULE_MIN ? "at least" : "greater than",
		             wk->min);
	if (n >= 0 && (size_t)n < len && (r & (TF_WRULE_MAX | TF_WRULE_MAX_OPEN)))
		snprintf(buf + n, len - (size_t)n, "%s%s %.15g", n ? " and " : "",
		         r & TF_WRULE_MAX ? "at most" : "less than", wk->max);
}

/* A number against the bounds of its schema row; `shown` is how the value was written,
 * `via` says where it came from ("" for a literal). 0 or -EINVAL (reported at n). */
static int check_range(struct loader *L, const struct tf_with_key *wk, const struct ynode *n,
                       double v, const char *shown, const char *via, const char *what)
{
	unsigned r = wk->rules;
	int bad = isnan(v) || ((r & TF_WRULE_MIN) && v < wk->min) ||
	          ((r & TF_WRULE_MIN_OPEN) && v <= wk->min) ||
	          ((r & TF_WRULE_MAX) && v > wk->max) || ((r & TF_WRULE_MAX_OPEN) && v >= wk->max);
	if (!bad)
		return 0;
	char range[96];
	range_text(wk, range, sizeof(range));
	err_at(L, n, NULL, "%s must be %s, not %.40s%s", what, range, shown, via);
	return -EINVAL;
}

/* The registry's name rule on a literal model name, alias or version. */
static int check_registry_name(struct loader *L, const struct tf_with_key *wk,
                               const struct ynode *n, const char *what)
{
	enum tf_registry_name kind = (wk->rules & TF_WRULE_MODEL_NAME) ? TF_REGNAME_MODEL
	                             : (wk->rules & TF_WRULE_ALIAS)    ? TF_REGNAME_ALIAS
	                                                               : TF_REGNAME_VERSION;
	char err[300];
	if (tf_registry_check_name(n->str, kind, err, sizeof(err)) == 0)
		return 0;
	err_at(L, n, "see docs/registry.md, Names", "%s: %s", what, err);
	return -EINVAL;
}

/* Checks a scalar against a check kind; `what` names the key. 0 or -EINVAL (reported). */
static int check_scalar(struct loader *L, const struct tf_with_key *wk,
                        const struct tf_with_value *w, const struct ynode *n, enum tf_with_check c,
                        const char *what)
{
	const struct tf_template *t = &w->tmpl;
	long long i;
	double f;
	int b;
	if (t->whole_ref) {
		const struct tf_ref *r = t->parts[0].ref;
		enum tf_vtype rt = ref_static_type(L, r);
		if (rt == TF_VT_LAST || rt == TF_VT_ANY)
			return 0;
		int ok;
		switch (c) {
		case TF_WCHECK_INT:
		case TF_WCHECK_NUMBER:
			ok = rt == TF_VT_NUMBER;
			if (ok && c == TF_WCHECK_INT && r->kind == TF_REF_PARAM &&
			    tf_pipeline_param(L->p, r->name)->type == TF_PARAM_FLOAT)
				ok = 0;
			break;
		case TF_WCHECK_BOOL:
			ok = rt == TF_VT_BOOL;
			break;
		default:
			ok = rt != TF_VT_LIST;
			break;
		}
		if (!ok) {
			const char *desc =
			    r->kind == TF_REF_PARAM
			        ? param_type_names[tf_pipeline_param(L->p, r->name)->type]
			        : tf_vtype_name(rt);
			err_at(L, n, "change the param's type or use another value",
			       "%s expects %s, but '${%s}' is %s %s", what,
			       c == TF_WCHECK_INT      ? "an integer"
			       : c == TF_WCHECK_NUMBER ? "a number"
			       : c == TF_WCHECK_BOOL   ? "true or false"
			                               : "a scalar",
			       r->path, desc[0] == 'i' ? "an" : "a", desc);
			return -EINVAL;
		}
		/* a param's value is known at load: the same bounds as a literal */
		const struct tf_param *pp =
		    r->kind == TF_REF_PARAM ? tf_pipeline_param(L->p, r->name) : NULL;
		if (pp && json_is_number(pp->value) &&
		    (c == TF_WCHECK_INT || c == TF_WCHECK_NUMBER)) {
			char shown[48], via[200];
			snprintf(shown, sizeof(shown), "%.15g", json_number_value(pp->value));
			snprintf(via, sizeof(via), " (the value of ${%s})", r->path);
			return check_range(L, wk, n, json_number_value(pp->value), shown, via,
			                   what);
		}
		if (pp && json_is_string(pp->value) && c == TF_WCHECK_STRING &&
		    (wk->rules & (TF_WRULE_MODEL_NAME | TF_WRULE_ALIAS | TF_WRULE_VERSION))) {
			struct ynode v = *n;
			v.str = (char *)json_string_value(pp->value);
			return check_registry_name(L, wk, &v, what);
		}
		return 0;
	}
	int has_ref = 0;
	for (size_t k = 0; k < t->nparts; k++)
		if (t->parts[k].ref)
			has_ref = 1;
	if (c == TF_WCHECK_STRING && !has_ref &&
	    (wk->rules & (TF_WRULE_MODEL_NAME | TF_WRULE_ALIAS | TF_WRULE_VERSION)))
		return check_registry_name(L, wk, n, what);
	if (c == TF_WCHECK_STRING || c == TF_WCHECK_STEP)
		return 0;
	if (has_ref) {
		err_at(L, n, "use a single ${...} on its own for a non-text value",
		       "%s expects %s, but text mixed with references is a string", what,
		       c == TF_WCHECK_BOOL   ? "true or false"
		       : c == TF_WCHECK_ENUM ? "a fixed choice"
		                             : "a number");
		return -EINVAL;
	}
	switch (c) {
	case TF_WCHECK_INT:
		if (is_plain(n) && !parse_int_text(n->str, &i))
			return check_range(L, wk, n, (double)i, n->str, "", what);
		err_at(L, n, n->style != YAML_PLAIN_SCALAR_STYLE ? "write it without quotes" : NULL,
		       "%s expects an integer, not '%.40s'", what, n->str);
		return -EINVAL;
	case TF_WCHECK_NUMBER:
		if (is_plain(n) && !parse_float_text(n->str, &f))
			return check_range(L, wk, n, f, n->str, "", what);
		err_at(L, n, n->style != YAML_PLAIN_SCALAR_STYLE ? "write it without quotes" : NULL,
		       "%s expects a number, not '%.40s'", what, n->str);
		return -EINVAL;
	case TF_WCHECK_BOOL:
		if (is_plain(n) && !parse_bool_text(n->str, &b))
			return 0;
		err_at(L, n, NULL, "%s expects true or false, not '%.40s'", what, n->str);
		return -EINVAL;
	case TF_WCHECK_ENUM: {
		for (size_t k = 0; wk->choices[k]; k++)
			if (!strcmp(wk->choices[k], n->str))
				return 0;
		const char *near = tf_diag_suggest(n->str, wk->choices);
		char hint[200];
		if (near) {
			snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
		} else {
			size_t off = (size_t)snprintf(hint, sizeof(hint), "choose one of:");
			for (size_t k = 0; wk->choices[k] && off < sizeof(hint); k++)
				off += (size_t)snprintf(hint + off, sizeof(hint) - off, "%s %s",
				                        k ? "," : "", wk->choices[k]);
		}
		err_at(L, n, hint, "%s: unknown value '%.40s'", what, n->str);
		return -EINVAL;
	}
	default:
		return 0;
	}
}

static int check_value_kind(struct loader *L, const struct tf_with_key *wk,
                            const struct tf_with_value *w, const struct ynode *n, const char *sname)
{
	char what[160];
	snprintf(what, sizeof(what), "'with.%s' of step '%s'", wk->key, sname);
	switch (wk->check) {
	case TF_WCHECK_INT_LIST:
	case TF_WCHECK_STR_LIST:
		if (n->kind == Y_SCALAR && w->tmpl.whole_ref) {
			enum tf_vtype rt = ref_static_type(L, w->tmpl.parts[0].ref);
			if (rt == TF_VT_LIST || rt == TF_VT_LAST || rt == TF_VT_ANY)
				return 0;
			err_at(L, n, "declare the param with 'type: list'",
			       "%s expects a list, but '${%s}' is a %s", what,
			       w->tmpl.parts[0].ref->path, tf_vtype_name(rt));
			return -EINVAL;
		}
		if (n->kind != Y_SEQ) {
			err_at(L, n, "write a list such as [256, 128]", "%s must be a list, not %s",
			       what, kind_name(n));
			return -EINVAL;
		}
		if (n->n == 0 && (wk->rules & TF_WRULE_NONEMPTY)) {
			err_at(L, n, "name the program and its arguments, e.g. [/bin/echo, hello]",
			       "%s must not be empty", what);
			return -EINVAL;
		}
		for (size_t i = 0; i < n->n; i++) {
			if (n->kids[i]->kind != Y_SCALAR) {
				err_at(L, n->kids[i], NULL, "items of %s must be scalars, not %s",
				       what, kind_name(n->kids[i]));
				continue;
			}
			check_scalar(L, wk, &w->items[i], n->kids[i],
			             wk->check == TF_WCHECK_INT_LIST ? TF_WCHECK_INT
			                                             : TF_WCHECK_STRING,
			             what);
			for (size_t j = 0; (wk->rules & TF_WRULE_UNIQUE) && j < i; j++)
				if (n->kids[j]->kind == Y_SCALAR &&
				    !strcmp(n->kids[j]->str, n->kids[i]->str)) {
					err_at(L, n->kids[i], "list each name once",
					       "%s lists '%.60s' twice", what, n->kids[i]->str);
					break;
				}
		}
		return 0;
	case TF_WCHECK_STR_MAP:
		if (n->kind != Y_MAP) {
			err_at(L, n, "write a mapping of names to values",
			       "%s must be a mapping, not %s", what, kind_name(n));
			return -EINVAL;
		}
		for (size_t i = 0; i + 1 < n->n; i += 2) {
			const struct ynode *k = n->kids[i];
			if (n->kids[i + 1]->kind != Y_SCALAR)
				err_at(L, n->kids[i + 1], NULL,
				       "values of %s must be scalars, not %s", what,
				       kind_name(n->kids[i + 1]));
			if ((wk->rules & TF_WRULE_ENV_NAMES) && k->kind == Y_SCALAR &&
			    !valid_env_name(k->str))
				err_at(L, k,
				       "use letters, digits and '_', not starting with a digit (no "
				       "'=')",
				       "%s: '%.60s' is not an environment variable name", what,
				       k->str);
		}
		return 0;
	default:
		if (n->kind != Y_SCALAR) {
			err_at(L, n, NULL, "%s must be a single value, not %s", what, kind_name(n));
			return -EINVAL;
		}
		if (check_scalar(L, wk, w, n, wk->check, what))
			return -EINVAL;
		if (wk->check == TF_WCHECK_STEP && !w->tmpl.nparts) {
			return 0;
		}
		if (wk->check == TF_WCHECK_STEP && !w->tmpl.whole_ref) {
			int j = step_lookup(L, n->str);
			const struct tf_step *self = &L->p->steps[L->cur_step];
			if (j < 0) {
				err_at(L, n, "name a step this one needs",
				       "%s: unknown step '%.60s'", what, n->str);
				return -EINVAL;
			}
			if (L->dag_ok &&
			    ((size_t)j == L->cur_step || !is_upstream(L, L->cur_step, (size_t)j))) {
				char hint[160];
				snprintf(hint, sizeof(hint), "add '%s' to the needs of '%s'",
				         n->str, self->name);
				err_at(L, n, hint, "%s: step '%s' is not upstream of '%s'", what,
				       n->str, self->name);
				return -EINVAL;
			}
		}
		return 0;
	}
}

static void load_with(struct loader *L, size_t idx)
{
	struct tf_step *s = &L->p->steps[idx];
	const struct ynode *m = L->sx[idx].with_node;
	if (!m)
		return;
	const struct tf_step_schema *sc = tf_step_schema(s->type);
	const char *allowed[32];
	size_t na = 0;
	for (const struct tf_with_key *k = sc->with; k->key && na < 31; k++)
		allowed[na++] = k->key;
	allowed[na] = NULL;
	char what[120];
	snprintf(what, sizeof(what), "'with' of %s step '%s'", sc->name, s->name);
	check_keys(L, m, allowed, what);
	s->with = tf_xcalloc(m->n / 2 + 1, sizeof(*s->with));
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const struct ynode *k = m->kids[i], *v = m->kids[i + 1];
		if (k->kind != Y_SCALAR)
			continue;
		const struct tf_with_key *wk = NULL;
		for (const struct tf_with_key *c = sc->with; c->key; c++)
			if (!strcmp(c->key, k->str))
				wk = c;
		if (!wk)
			continue; /* reported by check_keys */
		int dup = 0;
		for (size_t j = 0; j < s->nwith; j++)
			if (!strcmp(s->with[j].key, k->str))
				dup = 1;
		if (dup)
			continue;
		struct tf_with_value *w = &s->with[s->nwith++];
		w->key = tf_xstrdup(k->str);
		load_with_value(L, v, w);
		if (wk->check == TF_WCHECK_STRING || wk->check == TF_WCHECK_STR_LIST ||
		    wk->check == TF_WCHECK_STR_MAP)
			keep_source_text(w);
		check_value_kind(L, wk, w, v, s->name);
		if (wk->requires && v->kind == Y_SCALAR && !strcmp(v->str, wk->if_value) &&
		    !map_get(m, wk->requires)) {
			char hint[120];
			snprintf(hint, sizeof(hint), "add '%s: ...' to 'with'", wk->requires);
			err_at(L, v, hint, "'with.%s: %s' of step '%s' needs 'with.%s'", wk->key,
			       wk->if_value, s->name, wk->requires);
		}
	}
}

static void load_when(struct loader *L, size_t idx)
{
	struct tf_step *s = &L->p->steps[idx];
	const struct ynode *n = L->sx[idx].when_node;
	if (!n)
		return;
	int col, exact = scalar_exact(n, &col);
	struct tf_expr *e = tf_expr_parse(n->str, L->file, n->line, col, exact, L->d);
	if (!e)
		return;
	if (tf_expr_check(e, ref_type_cb, L, L->file, L->d)) {
		tf_expr_free(e);
		return;
	}
	s->when = e;
}

/* ---- schedule ------------------------------------------------------------------------ */

static const char *const concurrency_names[] = {"allow", "forbid", "replace", NULL};
static const char *const catchup_names[] = {"none", "latest", "all", NULL};

const char *tf_concurrency_name(enum tf_sched_concurrency c)
{
	return c < TF_CONCURRENCY_LAST ? concurrency_names[c] : NULL;
}

const char *tf_catchup_name(enum tf_sched_catchup c)
{
	return c < TF_CATCHUP_LAST ? catchup_names[c] : NULL;
}

/* The cron text of node n: a bad part is reported at its own column (quoted scalars start
 * one column after the quote). */
static void load_cron(struct loader *L, const struct ynode *n, struct tf_pipeline_schedule *sc)
{
	if (want_kind(L, n, Y_SCALAR, "'schedule.cron'"))
		return;
	char err[256];
	int col = 1;
	if (tf_cron_parse(n->str, &sc->spec, &col, err, sizeof(err))) {
		int quoted = n->style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
		             n->style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
		struct ynode at = *n;
		if (n->line == n->end_line || !strchr(n->str, '\n'))
			at.col = n->col + quoted + col - 1;
		err_at(L, &at,
		       "five fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *' "
		       "or '*/15 9-17 * * mon-fri'; or @hourly, @daily, @weekly, @monthly, @yearly",
		       "bad cron schedule: %s", err);
		return;
	}
	sc->cron = tf_xstrdup(n->str);
}

static void load_schedule(struct loader *L, const struct ynode *n)
{
	struct tf_pipeline_schedule *sc = tf_xcalloc(1, sizeof(*sc));
	L->p->schedule = sc;
	sc->line = n->line;
	sc->col = n->col;
	sc->concurrency = TF_CONCURRENCY_FORBID;
	sc->catchup = TF_CATCHUP_LATEST;
	sc->catchup_max = 10;
	sc->timezone = tf_xstrdup("UTC");
	if (n->kind == Y_SCALAR) { /* shorthand: `schedule: "0 3 * * *"` */
		load_cron(L, n, sc);
		return;
	}
	if (want_kind(L, n, Y_MAP, "'schedule'"))
		return;
	static const char *const keys[] = {
	    "cron", "timezone", "concurrency", "catchup", "catchup_max", "starting_deadline", NULL};
	check_keys(L, n, keys, "'schedule'");
	const struct ynode *x;
	int e;
	long long v;
	if (!(x = map_get(n, "cron")))
		err_at(L, n, "add 'cron: \"0 3 * * *\"' (or a macro such as @daily)",
		       "'schedule' has no 'cron'");
	else
		load_cron(L, x, sc);
	if ((x = map_get(n, "timezone")) && !want_kind(L, x, Y_SCALAR, "'schedule.timezone'")) {
		char err[300];
		if (tf_cron_tz_check(x->str, err, sizeof(err))) {
			err_at(L, x, NULL, "%s", err);
		} else {
			free(sc->timezone);
			sc->timezone = tf_xstrdup(x->str);
		}
	}
	if ((x = map_get(n, "concurrency")) &&
	    !get_enum(L, x, "concurrency policy", concurrency_names, &e))
		sc->concurrency = (enum tf_sched_concurrency)e;
	if ((x = map_get(n, "catchup")) && !get_enum(L, x, "catch-up policy", catchup_names, &e))
		sc->catchup = (enum tf_sched_catchup)e;
	if ((x = map_get(n, "catchup_max")) &&
	    !get_int(L, x, "'schedule.catchup_max'", 1, 1000, &v))
		sc->catchup_max = (int)v;
	if ((x = map_get(n, "starting_deadline")))
		get_duration(L, x, "'schedule.starting_deadline'", &sc->starting_deadline);
}

/* ---- the whole file ----------------------------------------------------------------- */

static const char *const top_keys[] = {"name",  "description", "params",  "defaults", "storage",
                                       "steps", "priority",    "project", "schedule", NULL};

static void load_pipeline(struct loader *L, const struct ynode *root,
                          const struct tf_param_override *ov, size_t nov)
{
	struct tf_pipeline *p = L->p;
	builtin_retries(&p->defaults.retries);
	p->defaults.cache = 1; /* results are reused unless `cache: false` */
	p->defaults.priority = p->priority = -1;
	if (!root || scalar_null(root)) {
		tf_diag_add(L->d, TF_DIAG_ERROR, L->file, root ? root->line : 1,
		            root ? root->col : 1, "start with 'name:' and 'steps:'",
		            "the pipeline file is empty");
		return;
	}
	if (root->kind != Y_MAP) {
		err_at(L, root, "start with 'name:' and 'steps:'",
		       "a pipeline must be a mapping, not %s", kind_name(root));
		return;
	}
	check_keys(L, root, top_keys, "the pipeline");
	const struct ynode *x;
	if (!(x = map_get(root, "name")))
		err_at(L, root, "add 'name: NAME' at the top", "the pipeline has no 'name'");
	else if ((p->name = get_string(L, x, "'name'")) && !valid_name(p->name))
		err_at(L, x, name_hint(p->name), "bad pipeline name '%.60s'", p->name);
	if ((x = map_get(root, "description")))
		p->description = get_string(L, x, "'description'");
	if ((x = map_get(root, "storage")) && (p->storage = get_string(L, x, "'storage'"))) {
		const char *sep = strstr(p->storage, "://");
		if (sep && strncmp(p->storage, "file://", 7) && strncmp(p->storage, "s3://", 5))
			err_at(L, x, "use file:///DIR, s3://BUCKET/PREFIX or a plain path",
			       "unsupported storage URL '%.60s'", p->storage);
	}
	load_class(L, root, "'", &p->priority, &p->project);
	if ((x = map_get(root, "schedule")))
		load_schedule(L, x);
	if ((x = map_get(root, "params")))
		load_params(L, x);
	apply_overrides(L, ov, nov);
	if ((x = map_get(root, "defaults")))
		load_defaults(L, x);

	const struct ynode *steps = map_get(root, "steps");
	if (!steps) {
		err_at(L, root, "add a 'steps:' list", "the pipeline has no 'steps'");
		return;
	}
	if (want_kind(L, steps, Y_SEQ, "'steps'"))
		return;
	if (steps->n == 0) {
		err_at(L, steps, "add at least one step", "the pipeline has no steps");
		return;
	}
	if (steps->n > TF_PIPELINE_MAX_STEPS) {
		err_at(L, steps, NULL, "too many steps: %zu (the limit is %d)", steps->n,
		       TF_PIPELINE_MAX_STEPS);
		return;
	}
	p->nsteps = steps->n;
	p->steps = tf_xcalloc(p->nsteps, sizeof(*p->steps));
	L->sx = tf_xcalloc(p->nsteps, sizeof(*L->sx));
	for (size_t i = 0; i < p->nsteps; i++)
		load_step(L, i, steps->kids[i]);

	/* duplicate names: sorted by (name, index), so each later one follows its first; the
	 * later one is reported and loses its name */
	L->sidx = tf_xcalloc(p->nsteps + 1, sizeof(*L->sidx));
	for (size_t i = 0; i < p->nsteps; i++)
		if (p->steps[i].name)
			L->sidx[L->nsidx++] = (struct nameidx){p->steps[i].name, i};
	qsort(L->sidx, L->nsidx, sizeof(*L->sidx), cmp_nameidx);
	size_t kept = 0;
	for (size_t a = 0, first = 0; a < L->nsidx; a++) {
		if (a == 0 || strcmp(L->sidx[a].name, L->sidx[first].name)) {
			first = a;
			L->sidx[kept++] = L->sidx[a];
			continue;
		}
		size_t i = L->sidx[a].idx, j = L->sidx[first].idx;
		char hint[96];
		snprintf(hint, sizeof(hint), "the first is at line %d, column %d; rename one",
		         p->steps[j].line, p->steps[j].col);
		err_at(L, L->sx[i].name_node, hint, "duplicate step name '%s'", p->steps[i].name);
		free(p->steps[i].name);
		p->steps[i].name = NULL;
		L->sx[i].ok = 0;
	}
	L->nsidx = kept;
	for (size_t i = 0; i < p->nsteps; i++)
		if (L->sx[i].ok)
			declare_outputs(L, i);

	L->dag_ok = 1;
	for (size_t i = 0; i < p->nsteps; i++) {
		if (!p->steps[i].name) {
			L->dag_ok = 0;
			continue;
		}
		const struct ynode *needs = map_get(L->sx[i].node, "needs");
		if (needs)
			resolve_needs(L, i, needs);
	}
	for (size_t i = 0; i < p->nsteps; i++)
		if (!p->steps[i].needs)
			p->steps[i].needs = tf_xcalloc(1, sizeof(size_t));
	/* cycles are searched over the needs that resolved, so a typo elsewhere does not hide
	 * one; upstream checks need every need resolved and no cycle */
	int needs_ok = L->dag_ok;
	L->dag_ok = 1;
	find_cycles(L);
	if (L->dag_ok)
		compute_order(L);
	L->dag_ok = L->dag_ok && needs_ok;

	for (size_t i = 0; i < p->nsteps; i++) {
		if (!L->sx[i].ok)
			continue;
		L->cur_step = i;
		load_with(L, i);
		load_when(L, i);
	}
}

static void free_with_value(struct tf_with_value *w)
{
	free(w->key);
	tf_template_release(&w->tmpl);
	for (size_t i = 0; i < w->nitems; i++)
		free_with_value(&w->items[i]);
	free(w->items);
}

void tf_pipeline_free(struct tf_pipeline *p)
{
	if (!p)
		return;
	free(p->path);
	free(p->source);
	free(p->name);
	free(p->description);
	free(p->storage);
	free(p->project);
	free(p->defaults.project);
	if (p->schedule) {
		free(p->schedule->cron);
		free(p->schedule->timezone);
		free(p->schedule);
	}
	for (size_t i = 0; i < p->nparams; i++) {
		free(p->params[i].name);
		free(p->params[i].description);
		free(p->params[i].text);
		json_decref(p->params[i].default_value);
		json_decref(p->params[i].value);
	}
	free(p->params);
	for (size_t i = 0; i < p->nsteps; i++) {
		struct tf_step *s = &p->steps[i];
		free(s->name);
		free(s->needs);
		for (size_t k = 0; k < s->nwith; k++)
			free_with_value(&s->with[k]);
		free(s->with);
		free(s->when_source);
		tf_expr_free(s->when);
		free(s->accelerator);
		for (size_t k = 0; k < s->ncache_inputs; k++)
			free(s->cache_inputs[k]);
		free(s->cache_inputs);
		slurm_opts_free(&s->slurm);
		free(s->project);
		for (size_t k = 0; k < s->noutputs; k++)
			free(s->outputs[k]);
		free(s->outputs);
		for (size_t k = 0; k < s->nmetrics; k++)
			free(s->metrics[k]);
		free(s->metrics);
	}
	free(p->steps);
	free(p->topo);
	slurm_opts_free(&p->defaults.slurm);
	free(p);
}

int tf_pipeline_load_buffer(const char *name, const char *buf, size_t len,
                            const struct tf_param_override *ov, size_t nov, unsigned flags,
                            struct tf_pipeline **out, struct tf_diag_list *diags)
{
	int rc = 0;
	size_t errors_before = diags->nerrors;
	if (len > TF_PIPELINE_MAX_BYTES) {
		tf_diag_add(diags, TF_DIAG_ERROR, name, 0, 0,
		            "split it or remove generated content",
		            "file too large: %zu bytes (pipelines are limited to %u bytes)", len,
		            TF_PIPELINE_MAX_BYTES);
		return -EFBIG;
	}
	struct ybuild b = {.file = name, .d = diags};
	rc = build_tree(&b, buf, len);
	if (rc) {
		arena_free(&b.arena);
		free(b.anchors);
		return rc == -E2BIG ? -E2BIG : -EINVAL;
	}
	struct tf_pipeline *p = tf_xcalloc(1, sizeof(*p));
	p->path = tf_xstrdup(name);
	p->source = tf_xmalloc(len + 1);
	memcpy(p->source, buf, len);
	p->source[len] = '\0';
	p->source_len = len;
	struct loader L = {.file = name, .d = diags, .p = p, .flags = flags};
	load_pipeline(&L, b.root, ov, nov);
	for (size_t i = 0; i < p->nsteps && L.sx; i++)
		free(L.sx[i].need_nodes);
	free(L.sx);
	free(L.sidx);
	free(L.upstream);
	arena_free(&b.arena);
	free(b.anchors);
	if (diags->nerrors > errors_before) {
		tf_pipeline_free(p);
		return -EINVAL;
	}
	*out = p;
	return 0;
}

int tf_pipeline_load(const char *path, const struct tf_param_override *ov, size_t nov,
                     unsigned flags, struct tf_pipeline **out, struct tf_diag_list *diags)
{
	struct stat st;
	if (stat(path, &st)) {
		int e = errno;
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0, NULL, "cannot read the file: %s",
		            strerror(e));
		return -e;
	}
	if (S_ISDIR(st.st_mode)) {
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0, "name a .yaml file",
		            "is a directory");
		return -EISDIR;
	}
	/* refuse by size before reading a byte, so a 100 MB file costs nothing */
	if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > TF_PIPELINE_MAX_BYTES) {
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0,
		            "split it or remove generated content",
		            "file too large: %jd bytes (pipelines are limited to %u bytes)",
		            (intmax_t)st.st_size, TF_PIPELINE_MAX_BYTES);
		return -EFBIG;
	}
	char *buf = NULL;
	size_t len = 0;
	int rc = tf_read_file(path, TF_PIPELINE_MAX_BYTES, &buf, &len);
	if (rc == -EFBIG) {
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0,
		            "split it or remove generated content",
		            "file too large: more than %u bytes", TF_PIPELINE_MAX_BYTES);
		return rc;
	}
	if (rc) {
		tf_diag_add(diags, TF_DIAG_ERROR, path, 0, 0, NULL, "cannot read the file: %s",
		            strerror(-rc));
		return rc;
	}
	rc = tf_pipeline_load_buffer(path, buf, len, ov, nov, flags, out, diags);
	free(buf);
	return rc;
}

/* ---- lookups, rendering, plans ------------------------------------------------------ */

const struct tf_param *tf_pipeline_param(const struct tf_pipeline *p, const char *name)
{
	for (size_t i = 0; i < p->nparams; i++)
		if (p->params[i].name && !strcmp(p->params[i].name, name))
			return &p->params[i];
	return NULL;
}

int tf_pipeline_step_index(const struct tf_pipeline *p, const char *name)
{
	for (size_t i = 0; i < p->nsteps; i++)
		if (p->steps[i].name && !strcmp(p->steps[i].name, name))
			return (int)i;
	return -1;
}

const struct tf_with_value *tf_step_with(const struct tf_step *s, const char *key)
{
	for (size_t i = 0; i < s->nwith; i++)
		if (!strcmp(s->with[i].key, key))
			return &s->with[i];
	return NULL;
}

json_t *tf_pipeline_lookup_param(void *ctx, const struct tf_ref *ref)
{
	const struct tf_pipeline *p = ctx;
	if (ref->kind != TF_REF_PARAM)
		return NULL;
	const struct tf_param *par = tf_pipeline_param(p, ref->name);
	if (par && par->text && ref->as_text)
		return json_string(par->text);
	return par && par->value ? json_incref(par->value) : NULL;
}

static json_t *render_value(const struct tf_with_value *w, tf_lookup_fn fn, void *ctx,
                            int as_text, char *err, size_t errlen)
{
	if (w->kind == TF_WITH_SCALAR && as_text && w->tmpl.whole_ref) {
		char *s = tf_template_render(&w->tmpl, fn, ctx, err, errlen);
		json_t *j = s ? json_string(s) : NULL;
		if (s && !j)
			j = json_stringn_nocheck(s, strlen(s));
		free(s);
		return j;
	}
	if (w->kind == TF_WITH_SCALAR) {
		int has_ref = 0;
		for (size_t i = 0; i < w->tmpl.nparts; i++)
			if (w->tmpl.parts[i].ref)
				has_ref = 1;
		if (!has_ref && w->plain) {
			struct ynode n = {.kind = Y_SCALAR, .style = YAML_PLAIN_SCALAR_STYLE};
			char *s = tf_template_render(&w->tmpl, NULL, NULL, err, errlen);
			n.str = s;
			n.len = strlen(s);
			json_t *j = scalar_json(&n);
			free(s);
			return j;
		}
		return tf_template_render_json(&w->tmpl, fn, ctx, err, errlen);
	}
	json_t *c = w->kind == TF_WITH_LIST ? json_array() : json_object();
	for (size_t i = 0; i < w->nitems; i++) {
		json_t *v = render_value(&w->items[i], fn, ctx, as_text, err, errlen);
		if (!v) {
			json_decref(c);
			return NULL;
		}
		if (w->kind == TF_WITH_LIST)
			json_array_append_new(c, v);
		else
			json_object_set_new(c, w->items[i].key, v);
	}
	return c;
}

json_t *tf_step_render_with(const struct tf_step *s, tf_lookup_fn fn, void *ctx, char *err,
                            size_t errlen)
{
	json_t *o = json_object();
	for (size_t i = 0; i < s->nwith; i++) {
		/* argv and env items end up as text: a number param in them keeps its source text
		 * (a whole `argv: ${params.list}` stays a list) */
		int as_text = s->with[i].kind != TF_WITH_SCALAR &&
		              (!strcmp(s->with[i].key, "argv") || !strcmp(s->with[i].key, "env"));
		json_t *v = render_value(&s->with[i], fn, ctx, as_text, err, errlen);
		if (!v) {
			json_decref(o);
			return NULL;
		}
		json_object_set_new(o, s->with[i].key, v);
	}
	return o;
}

json_t *tf_pipeline_plan_json(const struct tf_pipeline *p)
{
	json_t *levels = json_array();
	for (int l = 0; l < p->nlevels; l++)
		json_array_append_new(levels, json_array());
	json_t *steps = json_array();
	for (size_t a = 0; a < p->nsteps; a++) {
		const struct tf_step *s = &p->steps[p->topo ? p->topo[a] : a];
		json_t *needs = json_array();
		for (size_t k = 0; k < s->nneeds; k++)
			json_array_append_new(needs, json_string(p->steps[s->needs[k]].name));
		json_t *o =
		    json_pack("{s:s, s:s, s:i, s:o, s:s, s:b, s:i, s:f}", "name", s->name, "type",
		              tf_step_type_name(s->type), "level", s->level, "needs", needs,
		              "executor", tf_executor_name(s->executor), "cache", s->cache,
		              "retries", s->retries.limit, "timeout", s->timeout);
		if (s->accelerator)
			json_object_set_new(o, "accelerator", json_string(s->accelerator));
		if (s->when_source)
			json_object_set_new(o, "when", json_string(s->when_source));
		json_array_append_new(steps, o);
		json_array_append_new(json_array_get(levels, (size_t)s->level),
		                      json_string(s->name));
	}
	json_t *params = json_object();
	for (size_t i = 0; i < p->nparams; i++)
		json_object_set_new(params, p->params[i].name,
		                    p->params[i].value ? json_incref(p->params[i].value)
		                                       : json_null());
	json_t *o =
	    json_pack("{s:s, s:s, s:o, s:o, s:o}", "file", p->path, "name", p->name ? p->name : "",
	              "params", params, "levels", levels, "steps", steps);
	if (p->storage)
		json_object_set_new(o, "storage", json_string(p->storage));
	return o;
}

static void dot_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

void tf_pipeline_plan_dot(const struct tf_pipeline *p, FILE *f)
{
	fputs("digraph ", f);
	dot_string(f, p->name ? p->name : "pipeline");
	fputs(" {\n  rankdir=LR;\n  node [shape=box, style=rounded];\n", f);
	for (int l = 0; l < p->nlevels; l++) {
		fputs("  { rank=same;", f);
		for (size_t i = 0; i < p->nsteps; i++)
			if (p->steps[i].level == l) {
				fputc(' ', f);
				dot_string(f, p->steps[i].name);
				fputc(';', f);
			}
		fputs(" }\n", f);
	}
	for (size_t i = 0; i < p->nsteps; i++) {
		const struct tf_step *s = &p->steps[i];
		char *label =
		    tf_xasprintf("%s\n%s%s%s%s", s->name, tf_step_type_name(s->type),
		                 s->accelerator ? " on " : "", s->accelerator ? s->accelerator : "",
		                 s->when ? "\n(conditional)" : "");
		fputs("  ", f);
		dot_string(f, s->name);
		fputs(" [label=", f);
		dot_string(f, label);
		fputs(s->when ? ", style=\"rounded,dashed\"];\n" : "];\n", f);
		free(label);
	}
	for (size_t i = 0; i < p->nsteps; i++)
		for (size_t k = 0; k < p->steps[i].nneeds; k++) {
			fputs("  ", f);
			dot_string(f, p->steps[p->steps[i].needs[k]].name);
			fputs(" -> ", f);
			dot_string(f, p->steps[i].name);
			fputs(";\n", f);
		}
	fputs("}\n", f);
}
