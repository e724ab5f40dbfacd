/* diag.c — the diagnostics list: collecting, sorting, printing compiler-style, JSON, and the
 * edit-distance helper behind "did you mean" hints. */
#include "orchestrator/diag.h"

#include "common/common.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void tf_diag_list_init(struct tf_diag_list *l)
{
	memset(l, 0, sizeof(*l));
}

void tf_diag_list_release(struct tf_diag_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		free(l->items[i].file);
		free(l->items[i].message);
		free(l->items[i].hint);
	}
	free(l->items);
	memset(l, 0, sizeof(*l));
}

void tf_diag_vadd(struct tf_diag_list *l, enum tf_diag_severity sev, const char *file, int line,
                  int col, const char *hint, const char *fmt, va_list ap)
{
	if (sev == TF_DIAG_ERROR)
		l->nerrors++;
	else
		l->nwarnings++;
	if (l->n >= TF_DIAG_MAX) {
		l->ndropped++;
		return;
	}
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->items = tf_xrealloc(l->items, l->cap * sizeof(*l->items));
	}
	struct tf_diag *d = &l->items[l->n++];
	d->severity = sev;
	d->file = tf_xstrdup(file ? file : "<input>");
	d->line = line;
	d->col = col;
	char *msg = NULL;
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = tf_xstrdup("(out of memory formatting a message)");
	d->message = msg;
	d->hint = hint ? tf_xstrdup(hint) : NULL;
}

void tf_diag_add(struct tf_diag_list *l, enum tf_diag_severity sev, const char *file, int line,
                 int col, const char *hint, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	tf_diag_vadd(l, sev, file, line, col, hint, fmt, ap);
	va_end(ap);
}

void tf_diag_error(struct tf_diag_list *l, const char *file, int line, int col, const char *fmt,
                   ...)
{
	va_list ap;
	va_start(ap, fmt);
	tf_diag_vadd(l, TF_DIAG_ERROR, file, line, col, NULL, fmt, ap);
	va_end(ap);
}

/* Insertion sort: lists are short and it is stable, so equal positions keep their order. */
void tf_diag_sort(struct tf_diag_list *l)
{
	for (size_t i = 1; i < l->n; i++) {
		struct tf_diag d = l->items[i];
		size_t j = i;
		while (j > 0) {
			const struct tf_diag *p = &l->items[j - 1];
			int c = strcmp(p->file, d.file);
			if (c < 0 || (c == 0 &&
			              (p->line < d.line || (p->line == d.line && p->col <= d.col))))
				break;
			l->items[j] = l->items[j - 1];
			j--;
		}
		l->items[j] = d;
	}
}

static const char *sev_name(enum tf_diag_severity s)
{
	return s == TF_DIAG_WARNING ? "warning" : "error";
}

void tf_diag_print(const struct tf_diag_list *l, FILE *f)
{
	for (size_t i = 0; i < l->n; i++) {
		const struct tf_diag *d = &l->items[i];
		/* messages quote input: control characters in it are shown, not obeyed */
		tf_fputs_escaped(d->file, f);
		if (d->line > 0)
			fprintf(f, ":%d", d->line);
		if (d->line > 0 && d->col > 0)
			fprintf(f, ":%d", d->col);
		fprintf(f, ": %s: ", sev_name(d->severity));
		tf_fputs_escaped(d->message, f);
		fputc('\n', f);
		if (d->hint) {
			fputs("  hint: ", f);
			tf_fputs_escaped(d->hint, f);
			fputc('\n', f);
		}
	}
	if (l->ndropped)
		fprintf(f, "(%zu further diagnostics not shown)\n", l->ndropped);
}

json_t *tf_diag_to_json(const struct tf_diag_list *l)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < l->n; i++) {
		const struct tf_diag *d = &l->items[i];
		json_t *o =
		    json_pack("{s:s, s:i, s:i, s:s, s:s}", "file", d->file, "line", d->line, "col",
		              d->col, "severity", sev_name(d->severity), "message", d->message);
		if (d->hint)
			json_object_set_new(o, "hint", json_string(d->hint));
		json_array_append_new(arr, o);
	}
	return arr;
}

size_t tf_diag_edit_distance(const char *a, const char *b, size_t cap)
{
	size_t la = strlen(a), lb = strlen(b);
	if ((la > lb ? la - lb : lb - la) > cap)
		return cap + 1;
	if (la > 64 || lb > 64)
		return cap + 1; /* names are short; long strings are never "near" anything */
	/* optimal string alignment: Levenshtein plus swaps of neighbours ("tpye" -> "type"),
	 * the commonest typo; three rolling rows */
	size_t r2[65], r1[65], r0[65], prevmin = 0;
	for (size_t j = 0; j <= lb; j++)
		r1[j] = j;
	for (size_t i = 1; i <= la; i++) {
		r0[0] = i;
		size_t rowmin = r0[0];
		for (size_t j = 1; j <= lb; j++) {
			size_t sub = r1[j - 1] + (a[i - 1] != b[j - 1]);
			size_t del = r1[j] + 1, ins = r0[j - 1] + 1;
			size_t m = sub < del ? sub : del;
			m = m < ins ? m : ins;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    r2[j - 2] + 1 < m)
				m = r2[j - 2] + 1;
			r0[j] = m;
			if (m < rowmin)
				rowmin = m;
		}
		if (rowmin > cap && prevmin > cap) /* no later cell can come back under cap */
			return cap + 1;
		prevmin = rowmin;
		memcpy(r2, r1, (lb + 1) * sizeof(size_t));
		memcpy(r1, r0, (lb + 1) * sizeof(size_t));
	}
	return r1[lb] > cap ? cap + 1 : r1[lb];
}

const char *tf_diag_suggest(const char *word, const char *const *candidates)
{
	size_t len = strlen(word);
	size_t cap = len >= 5 ? 2 : 1;
	if (cap >= len)
		cap = len ? len - 1 : 0;
	const char *best = NULL;
	size_t bestd = cap + 1;
	for (size_t i = 0; candidates && candidates[i]; i++) {
		size_t d = tf_diag_edit_distance(word, candidates[i], cap);
		if (d < bestd) {
			bestd = d;
			best = candidates[i];
		}
	}
	return best;
}
