/* expr.c — `${...}` references, `with` templates and the `when` expression language: parsing
 * with exact positions, static type checking, and evaluation through a lookup callback.
 *
 * Invariants: (1) parsing never recurses deeper than MAX_NEST, so a hostile "((((..." cannot
 * exhaust the stack; (2) evaluation has no side effects and calls nothing but the lookup
 * callback; (3) every reference carries the file position of its `${`. */
#include "orchestrator/expr.h"

#include "common/common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NEST 64 /* parentheses / `not` nesting in one expression */
#define MAX_NODES                                                                                  \
	2000 /* nodes in one expression: bounds the recursion of check/eval/free,                  \
	        since `a and b and ...` chains build a left-deep tree */

/* ---- positions ---------------------------------------------------------------------- */

/* Where a string starts in the file, and whether offsets map to columns. */
struct srcpos {
	const char *src; /* the string */
	const char *file;
	int line, col;   /* of src[0] */
	int exact;       /* offsets map to columns on the same line */
	size_t memo_off; /* the last offset converted, and its column: positions are asked */
	int memo_col;    /* for in increasing order, so counting resumes there (linear) */
};

static void pos_at(struct srcpos *p, size_t off, int *line, int *col)
{
	*line = p->line;
	*col = p->col;
	if (!p->exact)
		return;
	size_t i = 0;
	int c = p->col;
	if (p->memo_col && p->memo_off <= off) {
		i = p->memo_off;
		c = p->memo_col;
	}
	for (; i < off && p->src[i]; i++)
		if (((unsigned char)p->src[i] & 0xC0) != 0x80) /* count characters, not bytes */
			c++;
	p->memo_off = i;
	p->memo_col = c;
	*col = c;
}

static void pos_error(struct srcpos *p, struct tf_diag_list *d, size_t off, const char *hint,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void pos_error(struct srcpos *p, struct tf_diag_list *d, size_t off, const char *hint,
                      const char *fmt, ...)
{
	int line, col;
	pos_at(p, off, &line, &col);
	va_list ap;
	va_start(ap, fmt);
	tf_diag_vadd(d, TF_DIAG_ERROR, p->file, line, col, hint, fmt, ap);
	va_end(ap);
}

/* ---- references --------------------------------------------------------------------- */

static int is_name_start(int c)
{
	return isalpha(c) || c == '_';
}

static int is_name_char(int c)
{
	return isalnum(c) || c == '_' || c == '-';
}

static int valid_name(const char *s, size_t n)
{
	if (n == 0 || !is_name_start((unsigned char)s[0]))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!is_name_char((unsigned char)s[i]))
			return 0;
	return 1;
}

static char *xstrndup(const char *s, size_t n)
{
	char *p = tf_xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

int tf_ref_parse(const char *path, struct tf_ref *out, char *err, size_t errlen)
{
	const char *part[5];
	size_t plen[5];
	size_t np = 0;
	const char *s = path;
	for (;;) {
		const char *dot = strchr(s, '.');
		size_t n = dot ? (size_t)(dot - s) : strlen(s);
		if (np == 5)
			break;
		part[np] = s;
		plen[np] = n;
		np++;
		if (!dot)
			break;
		s = dot + 1;
	}
	struct tf_ref r = {.step_index = -1};
	if (np >= 1 && plen[0] == 6 && !strncmp(part[0], "params", 6)) {
		if (np != 2 || !valid_name(part[1], plen[1])) {
			tf_errf(err, errlen, "bad reference '${%s}': write '${params.NAME}'",
			         path);
			return -EINVAL;
		}
		r.kind = TF_REF_PARAM;
		r.name = xstrndup(part[1], plen[1]);
	} else if (np >= 1 && plen[0] == 5 && !strncmp(part[0], "steps", 5)) {
		int kind_ok = np == 4 && ((plen[2] == 7 && !strncmp(part[2], "outputs", 7)) ||
		                          (plen[2] == 7 && !strncmp(part[2], "metrics", 7)));
		if (!kind_ok || !valid_name(part[1], plen[1]) || !valid_name(part[3], plen[3])) {
			tf_errf(err, errlen,
			        "bad reference '${%s}': write '${steps.STEP.outputs.NAME}' or "
			        "'${steps.STEP.metrics.NAME}'",
			        path);
			return -EINVAL;
		}
		r.kind = part[2][0] == 'o' ? TF_REF_OUTPUT : TF_REF_METRIC;
		r.step = xstrndup(part[1], plen[1]);
		r.name = xstrndup(part[3], plen[3]);
	} else if (np >= 1 && plen[0] == 3 && !strncmp(part[0], "run", 3)) {
		if (np != 2 || !((plen[1] == 2 && !strncmp(part[1], "id", 2)) ||
		                 (plen[1] == 8 && !strncmp(part[1], "pipeline", 8)) ||
		                 (plen[1] == 5 && !strncmp(part[1], "state", 5)))) {
			tf_errf(err, errlen,
			        "bad reference '${%s}': write '${run.id}', '${run.pipeline}' or "
			        "'${run.state}'",
			        path);
			return -EINVAL;
		}
		r.kind = TF_REF_RUN;
		r.name = xstrndup(part[1], plen[1]);
	} else if (np >= 1 && plen[0] == 3 && !strncmp(part[0], "env", 3)) {
		int ok = np == 2 && plen[1] > 0 && !isdigit((unsigned char)part[1][0]);
		for (size_t i = 0; ok && i < plen[1]; i++)
			ok = isalnum((unsigned char)part[1][i]) || part[1][i] == '_';
		if (!ok) {
			tf_errf(err, errlen,
			        "bad reference '${%s}': write '${env.NAME}' with NAME an environment "
			        "variable (letters, digits and '_', not starting with a digit)",
			        path);
			return -EINVAL;
		}
		r.kind = TF_REF_ENV;
		r.name = xstrndup(part[1], plen[1]);
	} else {
		tf_errf(err, errlen,
		        "bad reference '${%s}': references start with 'params.', 'steps.', 'run.' "
		        "or 'env.'",
		        path);
		return -EINVAL;
	}
	r.path = tf_xstrdup(path);
	*out = r;
	return 0;
}

void tf_ref_release(struct tf_ref *r)
{
	if (!r)
		return;
	free(r->path);
	free(r->step);
	free(r->name);
	memset(r, 0, sizeof(*r));
}

/* Parses the reference whose `${` is at src[off]; *end is set past the `}`. Returns a new
 * reference or NULL with a diagnostic. */
static struct tf_ref *parse_ref_at(struct srcpos *p, size_t off, size_t *end,
                                   struct tf_diag_list *d)
{
	const char *s = p->src + off + 2;
	const char *close = strchr(s, '}');
	if (!close) {
		pos_error(p, d, off, "close it with '}'", "unterminated reference '%.40s'",
		          p->src + off);
		*end = strlen(p->src);
		return NULL;
	}
	*end = (size_t)(close - p->src) + 1;
	const char *a = s, *b = close;
	while (a < b && isspace((unsigned char)*a))
		a++;
	while (b > a && isspace((unsigned char)b[-1]))
		b--;
	if (a == b) {
		pos_error(p, d, off, "write '${params.NAME}' or '${steps.STEP.metrics.NAME}'",
		          "empty reference '${}'");
		return NULL;
	}
	char *path = xstrndup(a, (size_t)(b - a));
	struct tf_ref *r = tf_xcalloc(1, sizeof(*r));
	char err[256];
	if (tf_ref_parse(path, r, err, sizeof(err))) {
		pos_error(p, d, off, NULL, "%s", err);
		free(r);
		free(path);
		return NULL;
	}
	free(path);
	pos_at(p, off, &r->line, &r->col);
	return r;
}

static void free_ref(struct tf_ref *r)
{
	if (r) {
		tf_ref_release(r);
		free(r);
	}
}

/* ---- templates ---------------------------------------------------------------------- */

static void add_part(struct tf_template *t, char *text, struct tf_ref *ref)
{
	t->parts = tf_xrealloc(t->parts, (t->nparts + 1) * sizeof(*t->parts));
	t->parts[t->nparts].text = text;
	t->parts[t->nparts].ref = ref;
	t->nparts++;
}

int tf_template_parse(const char *src, const char *file, int line, int col, int col_exact,
                      struct tf_template *out, struct tf_diag_list *diags)
{
	struct srcpos p = {src, file, line, col, col_exact, 0, 0};
	struct tf_template t = {.source = tf_xstrdup(src)};
	int rc = 0;
	size_t n = strlen(src);
	char *lit = tf_xmalloc(n + 1);
	size_t nlit = 0;
	for (size_t i = 0; i < n;) {
		if (src[i] == '$' && src[i + 1] == '$' && src[i + 2] == '{') {
			lit[nlit++] = '$'; /* "$${" is a literal "${" */
			i += 2;
			continue;
		}
		if (src[i] == '$' && src[i + 1] == '{') {
			size_t end;
			struct tf_ref *r = parse_ref_at(&p, i, &end, diags);
			if (!r) {
				rc = -EINVAL;
			} else {
				if (nlit)
					add_part(&t, xstrndup(lit, nlit), NULL);
				nlit = 0;
				add_part(&t, NULL, r);
			}
			i = end;
			continue;
		}
		lit[nlit++] = src[i++];
	}
	if (nlit)
		add_part(&t, xstrndup(lit, nlit), NULL);
	free(lit);
	t.whole_ref = rc == 0 && t.nparts == 1 && t.parts[0].ref;
	*out = t;
	return rc;
}

void tf_template_release(struct tf_template *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nparts; i++) {
		free(t->parts[i].text);
		free_ref(t->parts[i].ref);
	}
	free(t->parts);
	free(t->source);
	memset(t, 0, sizeof(*t));
}

/* Appends the text form of a JSON value to a growing buffer. */
static void append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		*buf = tf_xrealloc(*buf, *cap);
	}
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = '\0';
}

char *tf_template_value_text(const json_t *v)
{
	if (json_is_string(v))
		return tf_xstrdup(json_string_value(v));
	if (json_is_integer(v))
		return tf_xasprintf("%lld", (long long)json_integer_value(v));
	if (json_is_real(v)) {
		double x = json_real_value(v);
		for (int prec = 1; prec <= 17; prec++) { /* shortest form that reads back exactly */
			char *s = tf_xasprintf("%.*g", prec, x);
			if (strtod(s, NULL) == x || prec == 17)
				return s;
			free(s);
		}
	}
	if (json_is_true(v))
		return tf_xstrdup("true");
	if (json_is_false(v))
		return tf_xstrdup("false");
	if (json_is_null(v))
		return tf_xstrdup("");
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	char *r = tf_xstrdup(s ? s : "");
	free(s);
	return r;
}

/* The message for a reference without a value. */
static void no_value(const struct tf_ref *r, char *err, size_t errlen)
{
	if (r->kind == TF_REF_ENV)
		tf_errf(err, errlen, "environment variable %s is not set ('${%s}')", r->name,
		        r->path);
	else
		tf_errf(err, errlen, "no value for '${%s}'", r->path);
}

char *tf_template_render(const struct tf_template *t, tf_lookup_fn fn, void *ctx, char *err,
                         size_t errlen)
{
	char *buf = NULL;
	size_t len = 0, cap = 0;
	append(&buf, &len, &cap, "", 0);
	for (size_t i = 0; i < t->nparts; i++) {
		const struct tf_template_part *part = &t->parts[i];
		if (part->text) {
			append(&buf, &len, &cap, part->text, strlen(part->text));
			continue;
		}
		struct tf_ref as_text = *part->ref;
		as_text.as_text = 1;
		json_t *v = fn ? fn(ctx, &as_text) : NULL;
		if (!v) {
			no_value(part->ref, err, errlen);
			free(buf);
			return NULL;
		}
		char *s = tf_template_value_text(v);
		append(&buf, &len, &cap, s, strlen(s));
		free(s);
		json_decref(v);
	}
	return buf;
}

json_t *tf_template_render_json(const struct tf_template *t, tf_lookup_fn fn, void *ctx, char *err,
                                size_t errlen)
{
	if (t->whole_ref) {
		json_t *v = fn ? fn(ctx, t->parts[0].ref) : NULL;
		if (!v)
			no_value(t->parts[0].ref, err, errlen);
		return v;
	}
	char *s = tf_template_render(t, fn, ctx, err, errlen);
	if (!s)
		return NULL;
	json_t *v = json_string(s);
	if (!v) /* not valid UTF-8: keep the bytes visible rather than failing later */
		v = json_stringn_nocheck(s, strlen(s));
	free(s);
	return v;
}

/* ---- expression lexer --------------------------------------------------------------- */

enum tok {
	T_EOF,
	T_NUM,
	T_STR,
	T_TRUE,
	T_FALSE,
	T_REF,
	T_LP,
	T_RP,
	T_NOT,
	T_AND,
	T_OR,
	T_EQ,
	T_NE,
	T_LT,
	T_LE,
	T_GT,
	T_GE,
	T_BAD
};

struct lexer {
	struct srcpos pos;  /* the source and its place in the file */
	size_t off;         /* next character */
	enum tok tok;       /* current token */
	size_t tok_off;     /* its offset */
	double num;         /* T_NUM value */
	char *str;          /* T_STR value (owned until taken) */
	struct tf_ref *ref; /* T_REF value (owned until taken) */
	struct tf_diag_list *diags;
	int failed; /* a diagnostic was added: stop parsing */
	int depth;  /* current nesting */
	int nodes;  /* nodes built so far */
};

static void lex_error(struct lexer *lx, size_t off, const char *hint, const char *msg)
{
	if (lx->failed)
		return;
	lx->failed = 1;
	pos_error(&lx->pos, lx->diags, off, hint, "%s", msg);
}

static void lex_next(struct lexer *lx)
{
	const char *s = lx->pos.src;
	free(lx->str);
	lx->str = NULL;
	free_ref(lx->ref);
	lx->ref = NULL;
	while (s[lx->off] && isspace((unsigned char)s[lx->off]))
		lx->off++;
	lx->tok_off = lx->off;
	const char *c = s + lx->off;
	if (!*c) {
		lx->tok = T_EOF;
		return;
	}
	if (c[0] == '$' && c[1] == '{') {
		size_t end;
		lx->ref = parse_ref_at(&lx->pos, lx->off, &end, lx->diags);
		lx->off = end;
		if (!lx->ref) {
			lx->failed = 1;
			lx->tok = T_BAD;
			return;
		}
		lx->tok = T_REF;
		return;
	}
	if (isdigit((unsigned char)c[0]) || (c[0] == '.' && isdigit((unsigned char)c[1]))) {
		char *end;
		lx->num = strtod(c, &end);
		if (isalpha((unsigned char)*end) || *end == '_' || !isfinite(lx->num)) {
			lx->tok = T_BAD;
			lex_error(lx, lx->off, NULL, "malformed number");
			return;
		}
		lx->off += (size_t)(end - c);
		lx->tok = T_NUM;
		return;
	}
	if (c[0] == '\'' || c[0] == '"') {
		char q = c[0];
		size_t n = strlen(c);
		char *out = tf_xmalloc(n + 1);
		size_t k = 0, i = 1;
		for (; c[i] && c[i] != q; i++) {
			if (c[i] == '\\' && c[i + 1]) {
				i++;
				out[k++] = c[i] == 'n' ? '\n' : c[i] == 't' ? '\t' : c[i];
			} else {
				out[k++] = c[i];
			}
		}
		out[k] = '\0';
		if (c[i] != q) {
			free(out);
			lx->tok = T_BAD;
			lex_error(lx, lx->off,
			          "close the string with the same quote it opened with",
			          "unterminated string");
			return;
		}
		lx->str = out;
		lx->off += i + 1;
		lx->tok = T_STR;
		return;
	}
	if (isalpha((unsigned char)c[0]) || c[0] == '_') {
		size_t n = 0;
		while (is_name_char((unsigned char)c[n]))
			n++;
		lx->off += n;
		static const struct {
			const char *w;
			enum tok t;
		} words[] = {{"true", T_TRUE},
		             {"false", T_FALSE},
		             {"and", T_AND},
		             {"or", T_OR},
		             {"not", T_NOT}};
		for (size_t i = 0; i < TF_ARRAY_LEN(words); i++)
			if (strlen(words[i].w) == n && !strncmp(c, words[i].w, n)) {
				lx->tok = words[i].t;
				return;
			}
		lx->tok = T_BAD;
		char msg[160];
		snprintf(msg, sizeof(msg), "unknown word '%.*s' in expression",
		         (int)(n > 40 ? 40 : n), c);
		lex_error(lx, lx->tok_off,
		          "quote strings ('...'), and write values as ${params.NAME} "
		          "or ${steps.STEP.metrics.NAME}",
		          msg);
		return;
	}
	static const struct {
		const char *s;
		enum tok t;
	} ops[] = {{"==", T_EQ},  {"!=", T_NE}, {"<=", T_LE}, {">=", T_GE},
	           {"&&", T_AND}, {"||", T_OR}, {"<", T_LT},  {">", T_GT},
	           {"!", T_NOT},  {"(", T_LP},  {")", T_RP}};
	for (size_t i = 0; i < TF_ARRAY_LEN(ops); i++) {
		size_t n = strlen(ops[i].s);
		if (!strncmp(c, ops[i].s, n)) {
			lx->off += n;
			lx->tok = ops[i].t;
			return;
		}
	}
	lx->tok = T_BAD;
	char msg[96];
	if (c[0] == '=')
		lex_error(lx, lx->off, "compare with '=='", "'=' is not an operator");
	else {
		snprintf(msg, sizeof(msg), "unexpected character '%c' in expression",
		         isprint((unsigned char)c[0]) ? c[0] : '?');
		lex_error(lx, lx->off, NULL, msg);
	}
}

/* ---- expression parser -------------------------------------------------------------- */

static struct tf_expr *node(struct lexer *lx, enum tf_expr_op op, size_t off)
{
	if (++lx->nodes == MAX_NODES + 1)
		lex_error(lx, off, "split the condition",
		          "expression too long: more than 2000 values and operators");
	struct tf_expr *e = tf_xcalloc(1, sizeof(*e));
	e->op = op;
	e->type = TF_VT_LAST;
	pos_at(&lx->pos, off, &e->line, &e->col);
	return e;
}

/* A binary node starts where its left operand does: copy that position rather than count
 * columns again from an earlier offset (which made long chains quadratic). */
static struct tf_expr *binary(struct lexer *lx, enum tf_expr_op op, struct tf_expr *a)
{
	struct tf_expr *e = node(lx, op, lx->tok_off);
	e->line = a->line;
	e->col = a->col;
	e->a = a;
	return e;
}

static struct tf_expr *parse_or(struct lexer *lx);

static struct tf_expr *parse_primary(struct lexer *lx)
{
	struct tf_expr *e = NULL;
	size_t off = lx->tok_off;
	switch (lx->tok) {
	case T_NUM:
		e = node(lx, TF_EXPR_NUMBER, off);
		e->num = lx->num;
		lex_next(lx);
		return e;
	case T_STR:
		e = node(lx, TF_EXPR_STRING, off);
		e->str = lx->str;
		lx->str = NULL;
		lex_next(lx);
		return e;
	case T_TRUE:
	case T_FALSE:
		e = node(lx, TF_EXPR_BOOL, off);
		e->num = lx->tok == T_TRUE;
		lex_next(lx);
		return e;
	case T_REF:
		e = node(lx, TF_EXPR_REF, off);
		e->ref = lx->ref;
		lx->ref = NULL;
		lex_next(lx);
		return e;
	case T_LP:
		if (++lx->depth > MAX_NEST) {
			lex_error(lx, off, NULL, "expression nested too deeply");
			return NULL;
		}
		lex_next(lx);
		e = parse_or(lx);
		if (!e)
			return NULL;
		if (lx->tok != T_RP) {
			lex_error(lx, lx->tok_off, "add the missing ')'", "expected ')'");
			tf_expr_free(e);
			return NULL;
		}
		lx->depth--;
		lex_next(lx);
		return e;
	case T_EOF:
		lex_error(lx, off, NULL, "expression ends where a value was expected");
		return NULL;
	case T_BAD:
		lx->failed = 1;
		return NULL;
	default:
		lex_error(lx, off, NULL,
		          "expected a value (number, string, true/false, ${...} or '(')");
		return NULL;
	}
}

static int is_cmp(enum tok t)
{
	return t >= T_EQ && t <= T_GE;
}

static enum tf_expr_op cmp_op(enum tok t)
{
	static const enum tf_expr_op m[] = {TF_EXPR_EQ, TF_EXPR_NE, TF_EXPR_LT,
	                                    TF_EXPR_LE, TF_EXPR_GT, TF_EXPR_GE};
	return m[t - T_EQ];
}

static struct tf_expr *parse_cmp(struct lexer *lx)
{
	struct tf_expr *a = parse_primary(lx);
	if (!a)
		return NULL;
	if (!is_cmp(lx->tok))
		return a;
	struct tf_expr *e = binary(lx, cmp_op(lx->tok), a);
	lex_next(lx);
	e->b = parse_primary(lx);
	if (!e->b) {
		tf_expr_free(e);
		return NULL;
	}
	if (is_cmp(lx->tok)) {
		lex_error(lx, lx->tok_off, "combine comparisons with 'and'",
		          "comparisons do not chain");
		tf_expr_free(e);
		return NULL;
	}
	return e;
}

static struct tf_expr *parse_not(struct lexer *lx)
{
	if (lx->tok != T_NOT)
		return parse_cmp(lx);
	size_t off = lx->tok_off;
	if (++lx->depth > MAX_NEST) {
		lex_error(lx, off, NULL, "expression nested too deeply");
		return NULL;
	}
	lex_next(lx);
	struct tf_expr *a = parse_not(lx);
	lx->depth--;
	if (!a)
		return NULL;
	struct tf_expr *e = node(lx, TF_EXPR_NOT, off);
	e->a = a;
	return e;
}

static struct tf_expr *parse_and(struct lexer *lx)
{
	struct tf_expr *a = parse_not(lx);
	if (!a)
		return NULL;
	while (lx->tok == T_AND && !lx->failed) {
		lex_next(lx);
		struct tf_expr *b = parse_not(lx);
		if (!b) {
			tf_expr_free(a);
			return NULL;
		}
		struct tf_expr *e = binary(lx, TF_EXPR_AND, a);
		e->b = b;
		a = e;
	}
	return a;
}

static struct tf_expr *parse_or(struct lexer *lx)
{
	struct tf_expr *a = parse_and(lx);
	if (!a)
		return NULL;
	while (lx->tok == T_OR && !lx->failed) {
		lex_next(lx);
		struct tf_expr *b = parse_and(lx);
		if (!b) {
			tf_expr_free(a);
			return NULL;
		}
		struct tf_expr *e = binary(lx, TF_EXPR_OR, a);
		e->b = b;
		a = e;
	}
	return a;
}

struct tf_expr *tf_expr_parse(const char *src, const char *file, int line, int col, int col_exact,
                              struct tf_diag_list *diags)
{
	struct lexer lx = {.pos = {src, file, line, col, col_exact, 0, 0}, .diags = diags};
	lex_next(&lx);
	struct tf_expr *e = NULL;
	if (lx.tok == T_EOF) {
		lex_error(&lx, 0, "write a condition such as ${params.deploy} == true",
		          "empty expression");
		goto out;
	}
	e = parse_or(&lx);
	if (e && lx.tok != T_EOF) {
		lex_error(&lx, lx.tok_off, "join conditions with 'and' / 'or'",
		          "unexpected text after the end of the expression");
		tf_expr_free(e);
		e = NULL;
	}
out:
	free(lx.str);
	free_ref(lx.ref);
	if (lx.failed) {
		tf_expr_free(e);
		return NULL;
	}
	return e;
}

void tf_expr_free(struct tf_expr *e)
{
	if (!e)
		return;
	tf_expr_free(e->a);
	tf_expr_free(e->b);
	free(e->str);
	free_ref(e->ref);
	free(e);
}

void tf_expr_visit_refs(const struct tf_expr *e, void (*fn)(void *ctx, struct tf_ref *r), void *ctx)
{
	if (!e)
		return;
	if (e->ref)
		fn(ctx, e->ref);
	tf_expr_visit_refs(e->a, fn, ctx);
	tf_expr_visit_refs(e->b, fn, ctx);
}

/* ---- type checking ------------------------------------------------------------------ */

const char *tf_vtype_name(enum tf_vtype t)
{
	static const char *const names[] = {"boolean", "number", "string", "list", "any"};
	return t < TF_VT_LAST ? names[t] : "unknown";
}

static const char *op_text(enum tf_expr_op op)
{
	static const char *const t[] = {"",   "",   "",  "",   "not", "and", "or",
	                                "==", "!=", "<", "<=", ">",   ">="};
	return op < TF_EXPR_LAST ? t[op] : "?";
}

struct checker {
	enum tf_vtype (*ref_type)(void *ctx, const struct tf_ref *r);
	void *ctx;
	const char *file;
	struct tf_diag_list *diags;
	int failed;
};

/* Returns the node's type; TF_VT_LAST means "already reported", which silences cascades. */
static enum tf_vtype check(struct checker *c, struct tf_expr *e)
{
	enum tf_vtype t = TF_VT_LAST, ta, tb;
	switch (e->op) {
	case TF_EXPR_NUMBER:
		t = TF_VT_NUMBER;
		break;
	case TF_EXPR_STRING:
		t = TF_VT_STRING;
		break;
	case TF_EXPR_BOOL:
		t = TF_VT_BOOL;
		break;
	case TF_EXPR_REF:
		t = c->ref_type ? c->ref_type(c->ctx, e->ref) : TF_VT_ANY;
		if (t == TF_VT_LAST)
			c->failed = 1;
		break;
	case TF_EXPR_NOT:
		ta = check(c, e->a);
		if (ta != TF_VT_BOOL && ta != TF_VT_ANY && ta != TF_VT_LAST) {
			tf_diag_add(c->diags, TF_DIAG_ERROR, c->file, e->line, e->col, NULL,
			            "'not' needs a boolean, got a %s", tf_vtype_name(ta));
			c->failed = 1;
		} else if (ta != TF_VT_LAST) {
			t = TF_VT_BOOL;
		}
		break;
	case TF_EXPR_AND:
	case TF_EXPR_OR:
		ta = check(c, e->a);
		tb = check(c, e->b);
		for (int i = 0; i < 2; i++) {
			enum tf_vtype x = i ? tb : ta;
			const struct tf_expr *side = i ? e->b : e->a;
			if (x != TF_VT_BOOL && x != TF_VT_ANY && x != TF_VT_LAST) {
				tf_diag_add(c->diags, TF_DIAG_ERROR, c->file, side->line, side->col,
				            "compare it first, e.g. '... >= 0.9'",
				            "'%s' needs boolean operands, got a %s", op_text(e->op),
				            tf_vtype_name(x));
				c->failed = 1;
			}
		}
		if (ta != TF_VT_LAST && tb != TF_VT_LAST)
			t = TF_VT_BOOL;
		break;
	default: /* comparisons */
		ta = check(c, e->a);
		tb = check(c, e->b);
		if (ta == TF_VT_LAST || tb == TF_VT_LAST)
			break;
		if (ta == TF_VT_LIST || tb == TF_VT_LIST) {
			tf_diag_add(c->diags, TF_DIAG_ERROR, c->file, e->line, e->col, NULL,
			            "lists cannot be compared with '%s'", op_text(e->op));
			c->failed = 1;
			break;
		}
		if (ta != TF_VT_ANY && tb != TF_VT_ANY && ta != tb) {
			tf_diag_add(c->diags, TF_DIAG_ERROR, c->file, e->line, e->col,
			            "compare values of the same type",
			            "cannot compare a %s with a %s", tf_vtype_name(ta),
			            tf_vtype_name(tb));
			c->failed = 1;
			break;
		}
		if (e->op != TF_EXPR_EQ && e->op != TF_EXPR_NE &&
		    (ta == TF_VT_BOOL || tb == TF_VT_BOOL)) {
			tf_diag_add(c->diags, TF_DIAG_ERROR, c->file, e->line, e->col,
			            "use '==' or '!=' for booleans",
			            "booleans cannot be ordered with '%s'", op_text(e->op));
			c->failed = 1;
			break;
		}
		t = TF_VT_BOOL;
		break;
	}
	e->type = t;
	return t;
}

int tf_expr_check(struct tf_expr *e, enum tf_vtype (*ref_type)(void *ctx, const struct tf_ref *r),
                  void *ctx, const char *file, struct tf_diag_list *diags)
{
	struct checker c = {ref_type, ctx, file, diags, 0};
	enum tf_vtype t = check(&c, e);
	if (t != TF_VT_LAST && t != TF_VT_BOOL && t != TF_VT_ANY) {
		tf_diag_add(diags, TF_DIAG_ERROR, file, e->line, e->col,
		            "compare it, e.g. '${steps.evaluate.metrics.accuracy} >= 0.9'",
		            "a condition must be true or false, this is a %s", tf_vtype_name(t));
		c.failed = 1;
	}
	return c.failed ? -EINVAL : 0;
}

/* ---- evaluation --------------------------------------------------------------------- */

void tf_value_release(struct tf_value *v)
{
	if (!v)
		return;
	free(v->str);
	memset(v, 0, sizeof(*v));
}

static int from_json(const json_t *j, const struct tf_ref *r, struct tf_value *out, char *err,
                     size_t errlen)
{
	memset(out, 0, sizeof(*out));
	if (json_is_boolean(j)) {
		out->type = TF_VT_BOOL;
		out->b = json_is_true(j);
	} else if (json_is_number(j)) {
		out->type = TF_VT_NUMBER;
		out->num = json_number_value(j);
	} else if (json_is_string(j)) {
		out->type = TF_VT_STRING;
		out->str = tf_xstrdup(json_string_value(j));
	} else {
		tf_errf(err, errlen, "'${%s}' is not a number, string or boolean", r->path);
		return -EINVAL;
	}
	return 0;
}

/* Numeric strings count as numbers when compared with a number (step outputs may carry
 * numbers as text). */
static int as_number(const struct tf_value *v, double *x)
{
	if (v->type == TF_VT_NUMBER) {
		*x = v->num;
		return 0;
	}
	if (v->type == TF_VT_STRING && v->str[0]) {
		char *end;
		double d = strtod(v->str, &end);
		while (isspace((unsigned char)*end))
			end++;
		if (!*end && !isspace((unsigned char)v->str[0])) {
			*x = d;
			return 0;
		}
	}
	return -EINVAL;
}

static int eval(const struct tf_expr *e, tf_lookup_fn fn, void *ctx, struct tf_value *out,
                char *err, size_t errlen)
{
	struct tf_value a = {0}, b = {0};
	int rc = 0;
	memset(out, 0, sizeof(*out));
	switch (e->op) {
	case TF_EXPR_NUMBER:
		out->type = TF_VT_NUMBER;
		out->num = e->num;
		break;
	case TF_EXPR_STRING:
		out->type = TF_VT_STRING;
		out->str = tf_xstrdup(e->str);
		break;
	case TF_EXPR_BOOL:
		out->type = TF_VT_BOOL;
		out->b = e->num != 0;
		break;
	case TF_EXPR_REF: {
		json_t *j = fn ? fn(ctx, e->ref) : NULL;
		if (!j) {
			no_value(e->ref, err, errlen);
			rc = -ENOENT;
			break;
		}
		rc = from_json(j, e->ref, out, err, errlen);
		json_decref(j);
		break;
	}
	case TF_EXPR_NOT:
	case TF_EXPR_AND:
	case TF_EXPR_OR:
		rc = eval(e->a, fn, ctx, &a, err, errlen);
		if (rc)
			break;
		if (a.type != TF_VT_BOOL) {
			tf_errf(err, errlen, "'%s' at %d:%d needs a boolean, got a %s",
			         op_text(e->op), e->line, e->col, tf_vtype_name(a.type));
			rc = -EINVAL;
			break;
		}
		out->type = TF_VT_BOOL;
		if (e->op == TF_EXPR_NOT) {
			out->b = !a.b;
			break;
		}
		if ((e->op == TF_EXPR_AND && !a.b) || (e->op == TF_EXPR_OR && a.b)) {
			out->b = a.b; /* short-circuit: b is not looked up */
			break;
		}
		rc = eval(e->b, fn, ctx, &b, err, errlen);
		if (rc)
			break;
		if (b.type != TF_VT_BOOL) {
			tf_errf(err, errlen, "'%s' at %d:%d needs a boolean, got a %s",
			         op_text(e->op), e->line, e->col, tf_vtype_name(b.type));
			rc = -EINVAL;
			break;
		}
		out->b = b.b;
		break;
	default: {
		rc = eval(e->a, fn, ctx, &a, err, errlen);
		if (!rc)
			rc = eval(e->b, fn, ctx, &b, err, errlen);
		if (rc)
			break;
		int c; /* <0, 0, >0 */
		double x, y;
		if (a.type == TF_VT_STRING && b.type == TF_VT_STRING) {
			c = strcmp(a.str, b.str);
			c = c < 0 ? -1 : c > 0;
		} else if (a.type == TF_VT_BOOL && b.type == TF_VT_BOOL) {
			if (e->op != TF_EXPR_EQ && e->op != TF_EXPR_NE) {
				tf_errf(err, errlen, "booleans cannot be ordered with '%s'",
				         op_text(e->op));
				rc = -EINVAL;
				break;
			}
			c = a.b != b.b; /* 0 or 1: only == and != reach here */
		} else if (!as_number(&a, &x) && !as_number(&b, &y)) {
			if (isnan(x) || isnan(y)) {
				c = 2; /* NaN: unequal and unordered, so only != is true */
			} else {
				c = x < y ? -1 : x > y ? 1 : 0;
			}
		} else {
			tf_errf(err, errlen, "cannot compare a %s with a %s at %d:%d",
			         tf_vtype_name(a.type), tf_vtype_name(b.type), e->line, e->col);
			rc = -EINVAL;
			break;
		}
		out->type = TF_VT_BOOL;
		switch (e->op) {
		case TF_EXPR_EQ:
			out->b = c == 0;
			break;
		case TF_EXPR_NE:
			out->b = c != 0;
			break;
		case TF_EXPR_LT:
			out->b = c == -1;
			break;
		case TF_EXPR_LE:
			out->b = c == -1 || c == 0;
			break;
		case TF_EXPR_GT:
			out->b = c == 1;
			break;
		default:
			out->b = c == 0 || c == 1;
			break;
		}
		break;
	}
	}
	tf_value_release(&a);
	tf_value_release(&b);
	if (rc)
		tf_value_release(out);
	return rc;
}

int tf_expr_eval(const struct tf_expr *e, tf_lookup_fn fn, void *ctx, struct tf_value *out,
                 char *err, size_t errlen)
{
	struct tf_value v;
	int rc = eval(e, fn, ctx, &v, err, errlen);
	if (!rc)
		*out = v;
	return rc;
}

int tf_expr_eval_bool(const struct tf_expr *e, tf_lookup_fn fn, void *ctx, int *out, char *err,
                      size_t errlen)
{
	struct tf_value v;
	int rc = eval(e, fn, ctx, &v, err, errlen);
	if (rc)
		return rc;
	if (v.type != TF_VT_BOOL) {
		tf_errf(err, errlen, "the condition gave a %s, not true or false",
		         tf_vtype_name(v.type));
		tf_value_release(&v);
		return -EINVAL;
	}
	*out = v.b;
	return 0;
}
