/* view.c — owns the run's progress display: a redrawn table on a TTY, plain lines elsewhere.
 * It only formats; the engine decides when to call it and passes a snapshot of the steps. */
#include "orchestrator/view.h"
#include "common/common.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MAX_TTY_ROWS 30      /* larger DAGs show the busiest rows and a count line */
#define PLAIN_PROGRESS_S 5.0 /* plain mode: a progress line per step at most this often */

struct row_memo {
	char *name;         /* step name */
	char state[16];     /* last state printed */
	int attempt;        /* last attempt printed */
	double progress_at; /* when a progress line was last printed */
};

struct tf_view {
	FILE *f;               /* output (borrowed) */
	int tty;               /* redraw in place */
	int drawn;             /* lines drawn by the last redraw (tty) */
	double t0;             /* monotonic start */
	struct row_memo *memo; /* plain mode: what was printed per row */
	size_t nmemo;
};

struct tf_view *tf_view_new(FILE *f, int tty, const char *run_id, const char *pipeline)
{
	struct tf_view *v = tf_xcalloc(1, sizeof(*v));
	v->f = f;
	v->tty = tty;
	v->t0 = tf_now_monotonic();
	fprintf(f, "run %s: pipeline %s\n", run_id, pipeline);
	fflush(f);
	return v;
}

void tf_view_free(struct tf_view *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->nmemo; i++)
		free(v->memo[i].name);
	free(v->memo);
	free(v);
}

double tf_view_interval(const struct tf_view *v)
{
	return v->tty ? 0.25 : PLAIN_PROGRESS_S;
}

static double num(json_t *o, const char *k, int *ok)
{
	json_t *x = json_object_get(o, k);
	if (json_is_number(x)) {
		*ok = 1;
		return json_number_value(x);
	}
	*ok = 0;
	return 0;
}

void tf_view_progress_text(const char *line, int bar_width, char *out, size_t len)
{
	json_t *o = line ? json_loads(line, 0, NULL) : NULL;
	size_t off = 0;
	out[0] = '\0';
	if (!json_is_object(o)) {
		snprintf(out, len, "%s", line ? line : "");
		json_decref(o);
		return;
	}
	int ok1, ok2;
	double frac = -1;
	double a = num(o, "fraction", &ok1);
	if (ok1)
		frac = a;
	else {
		a = num(o, "step", &ok1);
		double b = num(o, "steps", &ok2);
		if (!ok2)
			b = num(o, "total_steps", &ok2);
		if (ok1 && ok2 && b > 0)
			frac = a / b;
	}
	if (frac >= 0 && bar_width > 0) {
		if (frac > 1)
			frac = 1;
		int fill = (int)(frac * bar_width + 0.5);
		off += (size_t)snprintf(out + off, len - off, "[");
		for (int i = 0; i < bar_width && off + 2 < len; i++)
			out[off++] = i < fill ? '#' : '.';
		off +=
		    (size_t)snprintf(out + off, len > off ? len - off : 0, "] %3.0f%%", frac * 100);
	}
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		if (off >= len)
			break;
		/* Shown by the bar already, or noise. */
		if (!strcmp(k, "fraction") || !strcmp(k, "total_steps") || !strcmp(k, "steps") ||
		    !strcmp(k, "epochs") ||
		    (!strcmp(k, "event") && json_is_string(v) &&
		     !strcmp(json_string_value(v), "step")))
			continue;
		if (json_is_integer(v))
			off += (size_t)snprintf(out + off, len - off, " %s=%lld", k,
			                        (long long)json_integer_value(v));
		else if (json_is_real(v))
			off += (size_t)snprintf(out + off, len - off, " %s=%.4g", k,
			                        json_real_value(v));
		else if (json_is_string(v))
			off += (size_t)snprintf(out + off, len - off, " %s=%s", k,
			                        json_string_value(v));
	}
	json_decref(o);
}

static void fmt_duration(double d, char *buf, size_t len)
{
	if (d < 0)
		snprintf(buf, len, "-");
	else if (d < 60)
		snprintf(buf, len, "%.1fs", d);
	else
		snprintf(buf, len, "%dm%02ds", (int)(d / 60), (int)d % 60);
}

/* Columns of the terminal behind f (80 when it cannot tell). Every line the live view draws
 * is cut to fit: a line the terminal wraps takes two rows, and moving the cursor up by the
 * number of lines drawn would then leave a stale copy of the top rows on the screen. */
static int term_cols(FILE *f)
{
	struct winsize ws;
	if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

/* Visible width of a step row before its detail text: "  %-18s %-9s %-9s %2d %8s  ". */
#define ROW_PREFIX_COLS 54

static void redraw(struct tf_view *v, const struct tf_view_row *rows, size_t n)
{
	int cols = term_cols(v->f) - 1; /* never write the last column (pending-wrap quirks) */
	int detail = cols - ROW_PREFIX_COLS;
	if (detail < 0)
		detail = 0;
	if (v->drawn)
		fprintf(v->f, "\033[%dA", v->drawn);
	int lines = 0;
	size_t counts[9] = {0};
	const char *names[9] = {"pending", "queued",  "running", "retrying", "succeeded",
	                        "cached",  "skipped", "failed",  NULL};
	for (size_t i = 0; i < n; i++)
		for (int k = 0; names[k]; k++)
			if (!strcmp(rows[i].state, names[k]))
				counts[k]++;
	size_t shown = 0;
	for (size_t i = 0; i < n && shown < MAX_TTY_ROWS; i++) {
		const struct tf_view_row *r = &rows[i];
		/* In big DAGs show only what is active or needs attention. */
		if (n > MAX_TTY_ROWS &&
		    (!strcmp(r->state, "succeeded") || !strcmp(r->state, "pending") ||
		     !strcmp(r->state, "cached")))
			continue;
		char dur[32], extra[256] = "";
		fmt_duration(r->duration, dur, sizeof(dur));
		if (r->progress && r->progress[0])
			tf_view_progress_text(r->progress, 20, extra, sizeof(extra));
		else if (r->reason)
			snprintf(extra, sizeof(extra), "%s", r->reason);
		const char *color = !strcmp(r->state, "succeeded") || !strcmp(r->state, "cached")
		                        ? "\033[32m"
		                    : !strcmp(r->state, "failed")   ? "\033[31m"
		                    : !strcmp(r->state, "running")  ? "\033[36m"
		                    : !strcmp(r->state, "retrying") ? "\033[33m"
		                                                    : "\033[2m";
		fprintf(v->f, "\033[K  %-18.18s %-9.9s %s%-9s\033[0m %2d %8s  %.*s\n", r->name,
		        r->type, color, r->state, r->attempt, dur, detail, extra);
		lines++;
		shown++;
	}
	char summary[256];
	snprintf(summary, sizeof(summary),
	         "  %zu steps: %zu succeeded, %zu cached, %zu running, %zu queued, %zu retrying, "
	         "%zu pending, %zu skipped, %zu failed  [%.1fs]",
	         n, counts[4], counts[5], counts[2], counts[1], counts[3], counts[0], counts[6],
	         counts[7],
	         tf_now_monotonic() - v->t0);
	fprintf(v->f, "\033[K%.*s\n", cols > 0 ? cols : 0, summary);
	lines++;
	/* Clear what a taller previous frame left below. */
	for (int i = lines; i < v->drawn; i++)
		fprintf(v->f, "\033[K\n");
	if (v->drawn > lines)
		fprintf(v->f, "\033[%dA", v->drawn - lines);
	v->drawn = lines;
	fflush(v->f);
}

static void plain(struct tf_view *v, const struct tf_view_row *rows, size_t n)
{
	double now = tf_now_monotonic();
	if (v->nmemo != n) {
		for (size_t i = 0; i < v->nmemo; i++)
			free(v->memo[i].name);
		free(v->memo);
		v->memo = tf_xcalloc(n + 1, sizeof(*v->memo));
		v->nmemo = n;
		for (size_t i = 0; i < n; i++) {
			v->memo[i].name = tf_xstrdup(rows[i].name);
			snprintf(v->memo[i].state, sizeof(v->memo[i].state), "pending");
		}
	}
	for (size_t i = 0; i < n; i++) {
		const struct tf_view_row *r = &rows[i];
		struct row_memo *m = &v->memo[i];
		if (strcmp(m->state, r->state) || m->attempt != r->attempt) {
			char dur[32];
			fmt_duration(r->duration, dur, sizeof(dur));
			fprintf(v->f, "[%7.1fs] %-18s %-9s", now - v->t0, r->name, r->state);
			if (!strcmp(r->state, "running") || !strcmp(r->state, "retrying"))
				fprintf(v->f, " attempt %d", r->attempt);
			else if (r->duration >= 0 && strcmp(r->state, "pending"))
				fprintf(v->f, " %s", dur);
			if (r->reason && strcmp(r->state, "running"))
				fprintf(v->f, "  (%s)", r->reason);
			fprintf(v->f, "\n");
			snprintf(m->state, sizeof(m->state), "%s", r->state);
			m->attempt = r->attempt;
			m->progress_at = now;
		} else if (r->progress && r->progress[0] &&
		           now - m->progress_at >= PLAIN_PROGRESS_S) {
			char text[256];
			tf_view_progress_text(r->progress, 20, text, sizeof(text));
			fprintf(v->f, "[%7.1fs] %-18s %s\n", now - v->t0, r->name, text);
			m->progress_at = now;
		}
	}
	fflush(v->f);
}

void tf_view_update(struct tf_view *v, const struct tf_view_row *rows, size_t n)
{
	if (v->tty)
		redraw(v, rows, n);
	else
		plain(v, rows, n);
}
