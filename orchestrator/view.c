/* view.c — owns the run's progress display: a redrawn table on a TTY, plain lines elsewhere.
 * It only formats; the engine decides when to call it and passes a snapshot of the steps. */
#include "orchestrator/view.h"
#include "common/common.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MAX_TTY_ROWS 30      /* larger DAGs show the busiest rows and a "… N more" line */
#define PLAIN_PROGRESS_S 5.0 /* plain mode: a progress line per step at most this often */

struct row_memo {
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

/* Seconds as people read them: "17 s", "2m05s", "1h02m". */
static void fmt_eta(double s, char *buf, size_t len)
{
	if (s < 0 || s != s)
		snprintf(buf, len, "?");
	else if (s < 60)
		snprintf(buf, len, "%.0f s", s);
	else if (s < 3600)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
	else
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* A rate with a k/M prefix: 28.7k, 950, 1.20M. */
static void fmt_rate(double x, char *buf, size_t len)
{
	if (x >= 1e6)
		snprintf(buf, len, "%.3gM", x / 1e6);
	else if (x >= 1e3)
		snprintf(buf, len, "%.3gk", x / 1e3);
	else
		snprintf(buf, len, "%.3g", x);
}

/* How a known progress key reads ("loss 0.334", "acc 87.6%"); 0 when k is not one. */
static int known_metric(const char *k, double x, char *buf, size_t len)
{
	char r[32];
	if (!strcmp(k, "examples_per_second")) {
		fmt_rate(x, r, sizeof(r));
		snprintf(buf, len, "%s ex/s", r);
	} else if (!strcmp(k, "accuracy") || !strcmp(k, "train_accuracy") ||
	           !strcmp(k, "utilization")) {
		snprintf(buf, len, "%s %.1f%%",
		         !strcmp(k, "accuracy")         ? "acc"
		         : !strcmp(k, "train_accuracy") ? "train acc"
		                                        : "mxu",
		         x * 100);
	} else if (!strcmp(k, "epoch")) {
		snprintf(buf, len, "epoch %.1f", x);
	} else if (!strcmp(k, "loss") || !strcmp(k, "train_loss") || !strcmp(k, "lr") ||
	           !strcmp(k, "auc")) {
		snprintf(buf, len, "%s %.3g", !strcmp(k, "train_loss") ? "train loss" : k, x);
	} else {
		return 0;
	}
	return 1;
}

/* Appends " · text" (or "text" first) when it fits in len; 1 when it did. */
static int add_part(char *out, size_t *off, size_t len, const char *text)
{
	size_t need = strlen(text) + (*off ? 3 : 0);
	if (*off + need >= len)
		return 0;
	*off += (size_t)snprintf(out + *off, len - *off, "%s%s", *off ? "  " : "", text);
	return 1;
}

void tf_view_progress_text(const char *line, int bar_width, char *out, size_t len)
{
	json_t *o = line ? json_loads(line, 0, NULL) : NULL;
	size_t off = 0;
	if (!len)
		return;
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
		else { /* an epoch event carries the epoch and the epoch count */
			a = num(o, "epoch", &ok1);
			b = num(o, "epochs", &ok2);
			if (ok1 && ok2 && b > 0)
				frac = a / b;
		}
	}
	/* First what a person looks for (percent, time left), then the bar if the width
	 * allows it, then the metrics that fit. */
	char core[64] = "", eta[32];
	double e = num(o, "eta_seconds", &ok1);
	if (frac >= 0) {
		if (frac > 1)
			frac = 1;
		snprintf(core, sizeof(core), "%3.0f%%", frac * 100);
	}
	if (ok1) {
		fmt_eta(e, eta, sizeof(eta));
		size_t n = strlen(core);
		snprintf(core + n, sizeof(core) - n, "%sETA %s", n ? "  " : "", eta);
	}
	int bw = bar_width;
	if (frac >= 0 && bw > 0) {
		int room = (int)len - 1 - (int)strlen(core) - 3;
		if (bw > room)
			bw = room;
		if (bw >= 5) {
			int fill = (int)(frac * bw + 0.5);
			out[off++] = '[';
			for (int i = 0; i < bw; i++)
				out[off++] = i < fill ? '#' : '.';
			out[off++] = ']';
			out[off++] = ' ';
			out[off] = '\0';
		}
	}
	if (core[0] && off + strlen(core) < len) {
		memcpy(out + off, core, strlen(core) + 1);
		off += strlen(core);
	}
	const char *ev = json_string_value(json_object_get(o, "event"));
	if (ev && strcmp(ev, "step"))
		add_part(out, &off, len, ev); /* epoch, resume, checkpoint...: named, not dumped */
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		/* Shown already, or noise. */
		if (!strcmp(k, "fraction") || !strcmp(k, "total_steps") || !strcmp(k, "steps") ||
		    !strcmp(k, "epochs") || !strcmp(k, "event") || !strcmp(k, "eta_seconds") ||
		    !strcmp(k, "step") || !strcmp(k, "device_seconds") || !strcmp(k, "input_wait"))
			continue;
		char part[96];
		if (json_is_number(v) && known_metric(k, json_number_value(v), part, sizeof(part)))
			;
		else if (json_is_integer(v))
			snprintf(part, sizeof(part), "%s %lld", k, (long long)json_integer_value(v));
		else if (json_is_real(v))
			snprintf(part, sizeof(part), "%s %.4g", k, json_real_value(v));
		else if (json_is_string(v))
			snprintf(part, sizeof(part), "%s %.60s", k, json_string_value(v));
		else
			continue;
		add_part(out, &off, len, part);
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

/* Size of the terminal behind f: from the terminal, else $COLUMNS / $LINES, else 80x24.
 * Every line the live view draws is cut to fit: a line the terminal wraps takes two rows,
 * and moving the cursor up by the number of lines drawn would then leave a stale copy of the
 * top rows on the screen; a frame taller than the terminal scrolls its top away for good. */
static void term_size(FILE *f, int *cols, int *lines)
{
	struct winsize ws;
	const char *c = getenv("COLUMNS"), *l = getenv("LINES");
	*cols = 80;
	*lines = 24;
	if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
		*cols = ws.ws_col;
		*lines = ws.ws_row;
		return;
	}
	if (c && atoi(c) >= 20)
		*cols = atoi(c);
	if (l && atoi(l) >= 5)
		*lines = atoi(l);
}

/* A name in exactly w columns: cut in the middle when longer ("train-…-037"), so names that
 * share a long prefix stay told apart. Writes at most len bytes. */
static void fit_name(const char *name, int w, char *out, size_t len)
{
	int n = (int)strlen(name);
	if (n <= w || w < 5) {
		snprintf(out, len, "%-*.*s", w, w, name);
		return;
	}
	int head = (w - 1) / 2, tail = w - 1 - head;
	snprintf(out, len, "%.*s\xe2\x80\xa6%s", head, name, name + n - tail);
}

/* Whether a step's reason still says something in this state: waiting notes belong to
 * queued and retrying steps, not to one that runs or has succeeded since. */
static int reason_applies(const char *state)
{
	return strcmp(state, "running") && strcmp(state, "succeeded") && strcmp(state, "cached");
}

static void redraw(struct tf_view *v, const struct tf_view_row *rows, size_t n)
{
	int cols, tlines;
	term_size(v->f, &cols, &tlines);
	cols--; /* never write the last column (pending-wrap quirks) */
	int namew = 4;
	for (size_t i = 0; i < n; i++)
		if ((int)strlen(rows[i].name) > namew)
			namew = (int)strlen(rows[i].name);
	if (namew > cols / 3)
		namew = cols / 3 > 8 ? cols / 3 : 8;
	/* "  NAME TYPE(9) STATE(9) NN DURATION(8)  " */
	int prefix = 2 + namew + 1 + 9 + 1 + 9 + 1 + 2 + 1 + 8 + 2;
	int detail = cols - prefix;
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
	/* header, step rows, a "more" line, the count line: never taller than the terminal */
	int room = tlines - 3 < MAX_TTY_ROWS ? tlines - 3 : MAX_TTY_ROWS;
	if (room < 1)
		room = 1;
	int all_fit = (int)n <= room;
	fprintf(v->f, "\033[K\033[2m  %-*s %-9s %-9s %2s %8s  %.*s\033[0m\n", namew, "STEP", "TYPE",
	        "STATE", "#", "TIME", detail, "PROGRESS");
	lines++;
	size_t shown = 0;
	for (size_t i = 0; i < n && (int)shown < (all_fit ? room : room - 1); i++) {
		const struct tf_view_row *r = &rows[i];
		/* When not all rows fit, show what is active or needs attention. */
		if (!all_fit && (!strcmp(r->state, "succeeded") || !strcmp(r->state, "pending") ||
		                 !strcmp(r->state, "cached") || !strcmp(r->state, "skipped")))
			continue;
		char dur[32], extra[512] = "", name[256];
		fmt_duration(r->duration, dur, sizeof(dur));
		size_t dlen = (size_t)detail + 1 < sizeof(extra) ? (size_t)detail + 1 : sizeof(extra);
		if (r->progress && r->progress[0] && !strcmp(r->state, "running"))
			tf_view_progress_text(r->progress, 20, extra, dlen);
		else if (r->reason && reason_applies(r->state))
			snprintf(extra, dlen, "%s", r->reason);
		fit_name(r->name, namew, name, sizeof(name));
		for (char *c = extra; *c; c++) /* a reason or progress from a step's output */
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
		const char *color = !strcmp(r->state, "succeeded") || !strcmp(r->state, "cached")
		                        ? "\033[32m"
		                    : !strcmp(r->state, "failed")   ? "\033[31m"
		                    : !strcmp(r->state, "running")  ? "\033[36m"
		                    : !strcmp(r->state, "retrying") ? "\033[33m"
		                                                    : "\033[2m";
		fprintf(v->f, "\033[K  %s %-9.9s %s%-9s\033[0m %2d %8s  %.*s\n", name, r->type, color,
		        r->state, r->attempt, dur, detail, extra);
		lines++;
		shown++;
	}
	if (shown < n) {
		char more[128];
		snprintf(more, sizeof(more),
		         "  \xe2\x80\xa6 %zu more (%zu succeeded, %zu cached, %zu pending, %zu skipped)",
		         n - shown, counts[4], counts[5], counts[0], counts[6]);
		fprintf(v->f, "\033[K\033[2m%.*s\033[0m\n", cols + 2 > 0 ? cols + 2 : 0, more);
		lines++;
	}
	char summary[256];
	snprintf(summary, sizeof(summary),
	         "  %zu steps: %zu succeeded, %zu cached, %zu running, %zu queued, %zu retrying, "
	         "%zu pending, %zu skipped, %zu failed  [%.1fs]",
	         n, counts[4], counts[5], counts[2], counts[1], counts[3], counts[0], counts[6],
	         counts[7], tf_now_monotonic() - v->t0);
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

/* Prints what changed in rows[j], row at[j] (j itself when at is NULL) of the n shown. */
static void plain(struct tf_view *v, const struct tf_view_row *rows, const size_t *at, size_t k,
                  size_t n)
{
	double now = tf_now_monotonic();
	if (v->nmemo != n) {
		free(v->memo);
		v->memo = tf_xcalloc(n + 1, sizeof(*v->memo));
		v->nmemo = n;
		for (size_t i = 0; i < n; i++)
			snprintf(v->memo[i].state, sizeof(v->memo[i].state), "pending");
	}
	for (size_t j = 0; j < k; j++) {
		const struct tf_view_row *r = &rows[j];
		size_t i = at ? at[j] : j;
		if (i >= n)
			continue;
		struct row_memo *m = &v->memo[i];
		if (strcmp(m->state, r->state) || m->attempt != r->attempt) {
			char dur[32];
			fmt_duration(r->duration, dur, sizeof(dur));
			fprintf(v->f, "[%7.1fs] %-18s %-9s", now - v->t0, r->name, r->state);
			if (!strcmp(r->state, "running") || !strcmp(r->state, "retrying"))
				fprintf(v->f, " attempt %d", r->attempt);
			else if (r->duration >= 0 && strcmp(r->state, "pending"))
				fprintf(v->f, " %s", dur);
			if (r->reason && reason_applies(r->state))
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
		plain(v, rows, NULL, n, n);
}

int tf_view_update_rows(struct tf_view *v, const struct tf_view_row *rows, const size_t *at,
                        size_t k, size_t n)
{
	if (v->tty)
		return -EINVAL;
	plain(v, rows, at, k, n);
	return 0;
}

int tf_view_is_tty(const struct tf_view *v)
{
	return v->tty;
}
