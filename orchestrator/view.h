/* view.h — what a person sees while a run goes: a live table on a terminal (redrawn in
 * place: step, state, attempt, duration, training bar) or one plain line per change. */
#ifndef TF_VIEW_H
#define TF_VIEW_H

#include <stddef.h>
#include <stdio.h>

struct tf_view;

/* One step as the view shows it (strings borrowed for the call). */
struct tf_view_row {
	const char *name;   /* step name */
	const char *type;   /* step type */
	const char *state;  /* step state name */
	int attempt;        /* attempts so far */
	double duration;    /* seconds since it started, -1 when not started */
	char *progress;     /* latest progress line (JSON) while running, or NULL */
	const char *reason; /* why skipped/failed/retrying, or NULL */
};

/* A view writing to f (borrowed). tty: redraw in place with ANSI escapes. */
struct tf_view *tf_view_new(FILE *f, int tty, const char *run_id, const char *pipeline);
/* Shows the rows: on a TTY redraws the table; elsewhere prints a line per state change and,
 * at most every few seconds, a running step's progress. */
void tf_view_update(struct tf_view *v, const struct tf_view_row *rows, size_t n);
/* Plain mode only: shows the rows that may have changed, rows[j] being row at[j] of the n
 * the view shows (the others keep what was printed), so a caller that knows what changed
 * does not rebuild every row. -EINVAL on a TTY view, whose redraw needs every row. */
int tf_view_update_rows(struct tf_view *v, const struct tf_view_row *rows, const size_t *at,
                        size_t k, size_t n);
/* 1 when the view redraws a table on a terminal (tf_view_update only), 0 in plain mode. */
int tf_view_is_tty(const struct tf_view *v);
/* How often the engine should refresh the view while steps run (seconds). */
double tf_view_interval(const struct tf_view *v);
void tf_view_free(struct tf_view *v); /* NULL is a no-op */

/* Renders a progress line ({"epoch":..,"step":..,"steps":..,"loss":..} or any flat JSON
 * object) as short text with a bar when a fraction is known; writes at most len bytes. */
void tf_view_progress_text(const char *json_line, int bar_width, char *out, size_t len);

#endif
