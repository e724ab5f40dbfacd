/* pipeline_yaml.c — stage 1 of the loader (pipeline.c explains both stages): YAML -> a node
 * tree under hard limits, and the helpers of stage 2 that read typed values from the tree
 * (strings, booleans, numbers, durations, enums, names) and report problems at line:col.
 */
#include "orchestrator/pipeline_int.h"

#include "common/buf.h"
#include "common/common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <yaml.h>

/* ---- stage 1: YAML -> node tree ----------------------------------------------------- */

static void *arena_keep(struct arena *a, void *p)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 256;
		a->ptrs = tf_xrealloc(a->ptrs, a->cap * sizeof(void *));
	}
	a->ptrs[a->n++] = p;
	return p;
}

void tf_pl_arena_free(struct arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->ptrs[i]);
	free(a->ptrs);
	memset(a, 0, sizeof(*a));
}

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
int tf_pl_build_tree(struct ybuild *b, const char *buf, size_t len)
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

/* Room left in the diagnostics list: suggestions are skipped once it is full, so hostile
 * input cannot make "did you mean" searches the expensive part. */
int tf_pl_diag_room(const struct loader *L)
{
	return L->d->n < TF_DIAG_MAX;
}

void tf_pl_err_at(struct loader *L, const struct ynode *n, const char *hint, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	tf_diag_vadd(L->d, TF_DIAG_ERROR, L->file, n ? n->line : 0, n ? n->col : 0, hint, fmt, ap);
	va_end(ap);
}

const char *tf_pl_kind_name(const struct ynode *n)
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

int tf_pl_is_plain(const struct ynode *n)
{
	return n->kind == Y_SCALAR && n->style == YAML_PLAIN_SCALAR_STYLE;
}

int tf_pl_scalar_null(const struct ynode *n)
{
	return tf_pl_is_plain(n) &&
	       (!n->str[0] || !strcmp(n->str, "~") || !strcmp(n->str, "null") ||
	        !strcmp(n->str, "Null") || !strcmp(n->str, "NULL"));
}

int tf_pl_parse_bool_text(const char *s, int *out)
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

int tf_pl_parse_int_text(const char *s, long long *out)
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

int tf_pl_parse_float_text(const char *s, double *out)
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
json_t *tf_pl_scalar_json(const struct ynode *n)
{
	long long i;
	double f;
	int b;
	if (tf_pl_is_plain(n)) {
		if (tf_pl_scalar_null(n))
			return json_null();
		if (!tf_pl_parse_bool_text(n->str, &b))
			return json_boolean(b);
		if (!tf_pl_parse_int_text(n->str, &i))
			return json_integer(i);
		if (!tf_pl_parse_float_text(n->str, &f))
			return json_real(f);
	}
	json_t *s = json_stringn(n->str, n->len);
	return s ? s : json_stringn_nocheck(n->str, n->len);
}

/* Looks a key up in a mapping; NULL when absent. */
const struct ynode *tf_pl_map_get(const struct ynode *m, const char *key)
{
	if (!m || m->kind != Y_MAP)
		return NULL;
	for (size_t i = 0; i + 1 < m->n; i += 2)
		if (m->kids[i]->kind == Y_SCALAR && !strcmp(m->kids[i]->str, key))
			return m->kids[i + 1];
	return NULL;
}

/* The hint for a word that is none of `names`: "did you mean 'NEAR'?" when one is near it,
 * else `lead` and the names ("valid keys: a, b, c"). */
static void near_or_list(struct tf_buf *hint, const char *word, const char *const *names,
                         const char *lead)
{
	const char *near = tf_diag_suggest(word, names);
	if (near) {
		tf_buf_printf(hint, "did you mean '%s'?", near);
		return;
	}
	tf_buf_printf(hint, "%s", lead);
	for (size_t i = 0; names[i]; i++)
		tf_buf_printf(hint, "%s %s", i ? "," : "", names[i]);
}

static void report_dup_key(struct loader *L, const struct ynode *first, const struct ynode *k,
                           const char *what)
{
	char hint[96];
	snprintf(hint, sizeof(hint), "the first is at line %d, column %d", first->line, first->col);
	tf_pl_err_at(L, k, hint, "duplicate key '%.60s' in %s", k->str, what);
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
void tf_pl_check_keys(struct loader *L, const struct ynode *m, const char *const *allowed,
                      const char *what)
{
	if (m->n > 64)
		dup_keys_sorted(L, m, what);
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const struct ynode *k = m->kids[i];
		if (k->kind != Y_SCALAR) {
			tf_pl_err_at(L, k, NULL, "keys in %s must be plain names, not %s", what,
			             tf_pl_kind_name(k));
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
		struct tf_buf hint = {0};
		near_or_list(&hint, k->str, allowed, "valid keys:");
		tf_pl_err_at(L, k, tf_buf_str(&hint), "unknown key '%.60s' in %s", k->str, what);
		tf_buf_release(&hint);
	}
}

int tf_pl_want_kind(struct loader *L, const struct ynode *n, enum ykind k, const char *what)
{
	if (n->kind == k)
		return 0;
	const char *want = k == Y_MAP ? "a mapping" : k == Y_SEQ ? "a list" : "a scalar";
	tf_pl_err_at(L, n, NULL, "%s must be %s, not %s", what, want, tf_pl_kind_name(n));
	return -EINVAL;
}

char *tf_pl_get_string(struct loader *L, const struct ynode *n, const char *what)
{
	if (tf_pl_want_kind(L, n, Y_SCALAR, what))
		return NULL;
	return tf_xstrdup(n->str);
}

int tf_pl_get_bool(struct loader *L, const struct ynode *n, const char *what, int *out)
{
	if (tf_pl_want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	if (!tf_pl_is_plain(n) || tf_pl_parse_bool_text(n->str, out)) {
		tf_pl_err_at(L, n, "write true or false (without quotes)",
		             "%s must be true or false, not '%.40s'", what, n->str);
		return -EINVAL;
	}
	return 0;
}

int tf_pl_get_int(struct loader *L, const struct ynode *n, const char *what, long long lo,
                  long long hi, long long *out)
{
	if (tf_pl_want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	long long v;
	if (!tf_pl_is_plain(n) || tf_pl_parse_int_text(n->str, &v)) {
		tf_pl_err_at(L, n, NULL, "%s must be an integer, not '%.40s'", what, n->str);
		return -EINVAL;
	}
	if (v < lo || v > hi) {
		tf_pl_err_at(L, n, NULL, "%s must be between %lld and %lld, not %lld", what, lo, hi,
		             v);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int tf_pl_get_number(struct loader *L, const struct ynode *n, const char *what, double lo,
                     double *out)
{
	if (tf_pl_want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	double v;
	if (!tf_pl_is_plain(n) || tf_pl_parse_float_text(n->str, &v)) {
		tf_pl_err_at(L, n, NULL, "%s must be a number, not '%.40s'", what, n->str);
		return -EINVAL;
	}
	if (v < lo) {
		tf_pl_err_at(L, n, NULL, "%s must be at least %g, not %g", what, lo, v);
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
	if (!tf_pl_parse_float_text(s, &x)) { /* a plain number is seconds */
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

int tf_pl_get_duration(struct loader *L, const struct ynode *n, const char *what, double *out)
{
	if (tf_pl_want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	if (tf_duration_parse(n->str, out)) {
		tf_pl_err_at(
		    L, n, "write a number of seconds or a duration such as 30s, 5m, 1h30m, 250ms",
		    "%s: bad duration '%.40s'", what, n->str);
		return -EINVAL;
	}
	return 0;
}

/* A scalar that must be one of `names` (indexed by enum value). */
int tf_pl_get_enum(struct loader *L, const struct ynode *n, const char *what,
                   const char *const *names, int *out)
{
	if (tf_pl_want_kind(L, n, Y_SCALAR, what))
		return -EINVAL;
	for (int i = 0; names[i]; i++)
		if (!strcmp(names[i], n->str)) {
			*out = i;
			return 0;
		}
	struct tf_buf hint = {0};
	near_or_list(&hint, n->str, names, "choose one of:");
	tf_pl_err_at(L, n, tf_buf_str(&hint), "unknown %s '%.60s'", what, n->str);
	tf_buf_release(&hint);
	return -EINVAL;
}

int tf_pl_valid_name(const char *s)
{
	if (!isalpha((unsigned char)s[0]) && s[0] != '_')
		return 0;
	for (const char *c = s; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
			return 0;
	return strlen(s) <= 64;
}

/* What to do about a name valid_name() refused: a long one is too long, whatever it holds. */
const char *tf_pl_name_hint(const char *s)
{
	return strlen(s) > 64 ? "names are at most 64 characters"
	                      : "use letters, digits, '_' and '-', starting with a letter";
}

/* An environment variable name as POSIX shells take it: [A-Za-z_][A-Za-z0-9_]*. */
int tf_pl_valid_env_name(const char *s)
{
	if (!isalpha((unsigned char)s[0]) && s[0] != '_')
		return 0;
	for (const char *c = s; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '_')
			return 0;
	return 1;
}

/* Streams events up to the top-level `name:` value; stops at the first error. */
char *tf_pipeline_peek_name(const char *buf, size_t len)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	char *name = NULL;
	int depth = 0, expect_key = 1, is_name = 0, done = 0;
	if (len > TF_PIPELINE_MAX_BYTES || !yaml_parser_initialize(&parser))
		return NULL;
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	while (!done && yaml_parser_parse(&parser, &ev)) {
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_MAPPING_START_EVENT:
		case YAML_SEQUENCE_START_EVENT:
			done = depth == 0 && ev.type != YAML_MAPPING_START_EVENT; /* not a pipeline */
			depth++;
			break;
		case YAML_MAPPING_END_EVENT:
		case YAML_SEQUENCE_END_EVENT:
			done = --depth == 0;
			expect_key = 1; /* a value that was a list or a map ended */
			break;
		case YAML_SCALAR_EVENT:
		case YAML_ALIAS_EVENT:
			if (depth != 1)
				break;
			if (expect_key) {
				is_name = ev.type == YAML_SCALAR_EVENT &&
				          !strcmp((const char *)ev.data.scalar.value, "name");
			} else if (is_name && ev.type == YAML_SCALAR_EVENT && ev.data.scalar.length &&
			           ev.data.scalar.length <= 128) {
				name = tf_xstrdup((const char *)ev.data.scalar.value);
				done = 1;
			}
			expect_key = !expect_key;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	return name;
}
