/* diag.h — a list of diagnostics about an input file, printed like a compiler's:
 *
 *     pipelines/x.yaml:12:7: error: unknown key 'retires' in step 'train'
 *       hint: did you mean 'retries'?
 *
 * Loaders append every problem they find (not just the first) and the caller prints the lot.
 * Lines and columns are 1-based; 0 means "the whole file" and is left out of the output. */
#ifndef TF_DIAG_H
#define TF_DIAG_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

enum tf_diag_severity {
	TF_DIAG_ERROR,   /* the input is refused */
	TF_DIAG_WARNING, /* the input is accepted but probably not what was meant */
	TF_DIAG_LAST
};

struct tf_diag {
	enum tf_diag_severity severity; /* error or warning */
	char *file;                     /* file name as given by the caller (owned) */
	int line;                       /* 1-based line, 0 when not tied to a place */
	int col;                        /* 1-based column (characters), 0 when unknown */
	char *message;                  /* lowercase, no final period (owned) */
	char *hint;                     /* what to do about it, or NULL (owned) */
};

/* Past this many entries further diagnostics are counted but not stored, so a hostile file
 * cannot make the list itself the problem; the printout says how many were dropped. */
#define TF_DIAG_MAX 500

struct tf_diag_list {
	struct tf_diag *items; /* in the order they were added (owned) */
	size_t n;              /* stored entries */
	size_t cap;            /* allocated entries */
	size_t nerrors;        /* errors added, including dropped ones */
	size_t nwarnings;      /* warnings added, including dropped ones */
	size_t ndropped;       /* entries not stored because TF_DIAG_MAX was reached */
};

/* A zeroed struct is a valid empty list; _init only spells that out. */
void tf_diag_list_init(struct tf_diag_list *l);
/* Frees every entry and leaves the list empty and reusable. */
void tf_diag_list_release(struct tf_diag_list *l);

/* Appends a diagnostic; `hint` may be NULL. Strings are copied. */
void tf_diag_add(struct tf_diag_list *l, enum tf_diag_severity sev, const char *file, int line,
                 int col, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* tf_diag_add with the format's arguments as a va_list, for callers that take their own. */
void tf_diag_vadd(struct tf_diag_list *l, enum tf_diag_severity sev, const char *file, int line,
                  int col, const char *hint, const char *fmt, va_list ap)
    __attribute__((format(printf, 7, 0)));

/* Shorthand for an error without a hint / with one. */
void tf_diag_error(struct tf_diag_list *l, const char *file, int line, int col, const char *fmt,
                   ...) __attribute__((format(printf, 5, 6)));

/* Sorts entries by file, line and column (stable), as a compiler would print them. */
void tf_diag_sort(struct tf_diag_list *l);

/* Prints `FILE:LINE:COL: error: MESSAGE` and `  hint: HINT` lines, then a note about dropped
 * entries if any. */
void tf_diag_print(const struct tf_diag_list *l, FILE *f);

/* The list as a JSON array of {file, line, col, severity, message, hint}; a new reference. */
json_t *tf_diag_to_json(const struct tf_diag_list *l);

/* Edit distance (Levenshtein, plus a swap of neighbours costs 1) between two strings, capped:
 * returns cap+1 as soon as the distance is known to exceed `cap`. Used for "did you mean" hints. */
size_t tf_diag_edit_distance(const char *a, const char *b, size_t cap);

/* The candidate nearest to `word` (NULL-terminated array), or NULL when none is close enough
 * (distance at most 1 for short words, 2 for words of 5+ characters, less than the length). */
const char *tf_diag_suggest(const char *word, const char *const *candidates);

#endif
