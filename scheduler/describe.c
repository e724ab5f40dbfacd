/* describe.c — the scheduler's state for people and programs: pools with per-chip occupancy,
 * running jobs, the queue with the reason each job waits, utilization and accounting, as JSON
 * (jansson) and as a text map. Read-only apart from the largest-free-box cache. */
#include "scheduler/sched_int.h"
#include "common/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_id(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* Queued jobs in queue order for display: priority high to low, then FIFO. */
static int *queue_order(const struct tf_sched *s, int pool, int *n)
{
	int *ids = tf_xmalloc((size_t)s->njobs * sizeof(int)), k = 0;
	for (int prio = TF_SCHED_PRIO_MAX; prio >= 0; prio--) {
		int start = k;
		for (int pr = 0; pr < s->nprojects; pr++) {
			const struct qlist *q = &s->pools[pool].q[pr * NPRIO + prio];
			for (int i = q->lo; i < q->n; i++)
				if (q->v[i].flags & QE_LIVE)
					ids[k++] = q->v[i].id;
		}
		/* the projects' lists merged by seq, which is id order (sched_int.h) */
		qsort(ids + start, (size_t)(k - start), sizeof(int), by_id);
	}
	*n = k;
	return ids;
}

static json_t *box_json(const struct tf_box *b)
{
	return json_pack("{s:[i,i,i], s:[i,i,i]}", "origin", b->origin[0], b->origin[1],
	                 b->origin[2], "shape", b->shape[0], b->shape[1], b->shape[2]);
}

static json_t *usage_json(const char *name, double chip_s, double slice_s, int running, int jobs)
{
	return json_pack("{s:s, s:f, s:f, s:i, s:i}", "name", name, "chip_seconds", chip_s,
	                 "slice_seconds", slice_s, "running_chips", running, "jobs", jobs);
}

json_t *tf_sched_describe_json(struct tf_sched *s, double now)
{
	json_t *root = json_object(), *pools = json_array(), *running = json_array(),
	       *queue = json_array(), *projects = json_array(), *runs = json_array();
	char buf[256];
	json_object_set_new(root, "policy", json_string(tf_sched_policy_name(s->cfg.policy)));
	json_object_set_new(root, "time", json_real(now));
	json_object_set_new(root, "utilization", json_real(tf_sched_utilization(s, -1)));
	for (int pi = 0; pi < s->npools; pi++) {
		struct pool *p = &s->pools[pi];
		const struct tf_torus *t = &p->t;
		struct tf_box lb;
		int has_lb = tf_sched_pool_largest(s, pi, &lb);
		json_t *occ = json_array(), *host = json_array();
		for (int c = 0; c < t->nchips; c++) {
			int x = c % t->dims[0], r = c / t->dims[0];
			int v = p->owner[c];
			if ((p->failed[r] >> x) & 1)
				v = -1;
			else if (!v && ((p->reserved[r] >> x) & 1))
				v = -2;
			json_array_append_new(occ, json_integer(v));
			json_array_append_new(host, json_integer(tf_sched_chip_host(s, pi, c)));
		}
		if (has_lb)
			tf_sched_shape_str(lb.shape, t->ndims, buf, sizeof(buf));
		json_t *pj = json_pack(
		    "{s:s, s:s, s:s, s:[i,i,i], s:[b,b,b], s:i, s:i, s:i, s:i, s:f, s:f, s:s?, "
		    "s:i}",
		    "name", p->name, "spec", p->spec, "generation", p->tpu_gen, "dims", t->dims[0],
		    t->dims[1], t->dims[2], "wrap", t->wrap[0], t->wrap[1], t->wrap[2], "chips",
		    t->nchips, "busy", p->busy_chips, "failed", p->failed_chips, "free",
		    tf_torus_count(t, p->free), "utilization", tf_sched_utilization(s, pi),
		    "fragmentation", tf_sched_fragmentation(s, pi), "largest_free",
		    has_lb ? buf : NULL, "queued", p->queued);
		/* occupancy per chip (index x + X*(y + Y*z)): job id, 0 free, -1 failed,
		 * -2 reserved for a job waiting on preempted ones */
		json_object_set_new(pj, "occupancy", occ);
		json_object_set_new(pj, "host_of_chip", host);
		json_array_append_new(pools, pj);

		for (int k = 0; k < p->nrunning; k++) {
			const struct job *j = &s->jobs[p->running[k]];
			double sec = tf_sched_job_running_seconds(j, now);
			tf_sched_shape_str(j->shape, t->ndims, buf, sizeof(buf));
			json_t *jj = json_pack(
			    "{s:i, s:s?, s:s?, s:s, s:s, s:s, s:s, s:i, s:i, s:b, s:b, s:f, s:i, "
			    "s:f, s:f}",
			    "id", j->id, "name", j->name, "run", j->run, "project",
			    s->projects[j->project].name, "pool", p->name, "slice", buf, "state",
			    tf_sched_state_name(j->state), "chips", j->chips, "priority", j->prio,
			    "preemptible", j->preemptible, "borrowed", j->borrowed, "started",
			    j->started, "attempt", j->attempts, "chip_seconds",
			    j->chip_seconds + sec * j->chips, "slice_seconds",
			    j->slice_seconds + sec);
			json_object_set_new(jj, "box", box_json(&j->box));
			if (j->state == TF_JOB_DRAINING)
				json_object_set_new(jj, "deadline", json_real(j->deadline));
			json_array_append_new(running, jj);
		}
		int nq;
		int *ids = queue_order(s, pi, &nq);
		for (int k = 0; k < nq; k++) {
			const struct job *j = &s->jobs[ids[k]];
			char reason[160];
			tf_sched_job_reason(s, j->id, reason, sizeof(reason));
			tf_sched_shape_str(j->shape, t->ndims, buf, sizeof(buf));
			json_array_append_new(
			    queue,
			    json_pack("{s:i, s:s?, s:s?, s:s, s:s, s:s, s:i, s:i, s:b, s:f, s:i, "
			              "s:s}",
			              "id", j->id, "name", j->name, "run", j->run, "project",
			              s->projects[j->project].name, "pool", p->name, "slice", buf,
			              "chips", j->chips, "priority", j->prio, "preemptible",
			              j->preemptible, "waiting_seconds", now - j->submitted,
			              "attempts", j->attempts, "reason", reason));
		}
		free(ids);
	}
	for (int i = 0; i < s->nprojects; i++) {
		struct tf_sched_usage u;
		const struct project *pr = &s->projects[i];
		tf_sched_project_usage(s, pr->name, now, &u);
		json_t *pj =
		    usage_json(pr->name, u.chip_seconds, u.slice_seconds, u.running_chips, u.jobs);
		json_object_set_new(pj, "weight", json_real(pr->weight));
		json_object_set_new(pj, "quota_chips", json_integer(pr->quota));
		json_object_set_new(pj, "may_borrow", json_boolean(pr->may_borrow));
		json_array_append_new(projects, pj);
	}
	for (int i = 0; i < s->nruns; i++) {
		struct tf_sched_usage u;
		tf_sched_run_usage(s, s->runs[i].name, now, &u);
		json_array_append_new(runs, usage_json(s->runs[i].name, u.chip_seconds,
		                                       u.slice_seconds, u.running_chips, u.jobs));
	}
	json_object_set_new(root, "pools", pools);
	json_object_set_new(root, "running", running);
	json_object_set_new(root, "queue", queue);
	json_object_set_new(root, "projects", projects);
	json_object_set_new(root, "runs", runs);
	return root;
}

/* A growable string for the text view. */
struct sbuf {
	char *p;
	size_t n, cap;
};

__attribute__((format(printf, 2, 3))) static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		size_t room = b->cap - b->n;
		va_start(ap, fmt);
		int k = vsnprintf(b->p ? b->p + b->n : NULL, room, fmt, ap);
		va_end(ap);
		if (k < 0)
			return;
		if ((size_t)k < room) {
			b->n += (size_t)k;
			return;
		}
		b->cap = (b->cap + (size_t)k + 1) * 2;
		b->p = tf_xrealloc(b->p, b->cap);
	}
}

static const char letters[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwyz0123456789";

char *tf_sched_describe_text(struct tf_sched *s, double now)
{
	struct sbuf b = {0};
	char buf[64];
	sb_printf(&b, "policy %s, utilization %.1f%%\n", tf_sched_policy_name(s->cfg.policy),
	          100 * tf_sched_utilization(s, -1));
	int *letter_of = tf_xcalloc((size_t)s->njobs, sizeof(int));
	for (int pi = 0; pi < s->npools; pi++) {
		struct pool *p = &s->pools[pi];
		const struct tf_torus *t = &p->t;
		struct tf_box lb;
		int has_lb = tf_sched_pool_largest(s, pi, &lb);
		if (has_lb)
			tf_sched_shape_str(lb.shape, t->ndims, buf, sizeof(buf));
		sb_printf(&b,
		          "\npool %s (%s, %s%s%s): %d chips, %d busy, %d failed, utilization "
		          "%.1f%%, largest free %s, fragmentation %.2f\n",
		          p->name, p->spec, t->ndims == 3 ? "3D " : "2D ",
		          t->wrap[0] || t->wrap[1] || t->wrap[2] ? "torus" : "mesh",
		          t->wrap[0] && t->wrap[1] && (t->ndims < 3 || t->wrap[2]) ? ""
		          : t->wrap[0] || t->wrap[1] || t->wrap[2] ? " (partial wrap)"
		                                                   : "",
		          t->nchips, p->busy_chips, p->failed_chips,
		          100 * tf_sched_utilization(s, pi), has_lb ? buf : "none",
		          tf_sched_fragmentation(s, pi));
		for (int k = 0; k < p->nrunning; k++)
			letter_of[p->running[k]] = k % (int)(sizeof(letters) - 1);
		/* z planes side by side, as many as fit in 100 columns */
		int per = 100 / (t->dims[0] + 3);
		per = per < 1 ? 1 : per;
		for (int z0 = 0; z0 < t->dims[2]; z0 += per) {
			int z1 = z0 + per < t->dims[2] ? z0 + per : t->dims[2];
			if (t->ndims == 3) {
				for (int z = z0; z < z1; z++) {
					snprintf(buf, sizeof(buf), "z=%d", z);
					sb_printf(&b, "  %-*s ", t->dims[0], buf);
				}
				sb_printf(&b, "\n");
			}
			for (int y = 0; y < t->dims[1]; y++) {
				for (int z = z0; z < z1; z++) {
					int r = y + t->dims[1] * z;
					sb_printf(&b, "  ");
					for (int x = 0; x < t->dims[0]; x++) {
						int o = p->owner[x + t->dims[0] * r];
						char ch = '.';
						if ((p->failed[r] >> x) & 1)
							ch = 'x';
						else if (o)
							ch = letters[letter_of[o]];
						else if ((p->reserved[r] >> x) & 1)
							ch = '+';
						sb_printf(&b, "%c", ch);
					}
					sb_printf(&b, " ");
				}
				sb_printf(&b, "\n");
			}
		}
		sb_printf(&b,
		          "  legend: . free  x failed  + held for a job waiting on preemption%s\n",
		          p->nrunning > (int)sizeof(letters) - 1 ? "  (letters repeat)" : "");
		for (int k = 0; k < p->nrunning; k++) {
			const struct job *j = &s->jobs[p->running[k]];
			tf_sched_shape_str(j->shape, t->ndims, buf, sizeof(buf));
			sb_printf(&b,
			          "  %c job %d %s%s%s project %s prio %d %s %s at (%d,%d,%d)%s\n",
			          letters[letter_of[j->id]], j->id, j->name ? "'" : "",
			          j->name ? j->name : "", j->name ? "'" : "",
			          s->projects[j->project].name, j->prio, buf,
			          tf_sched_state_name(j->state), j->box.origin[0], j->box.origin[1],
			          j->box.origin[2], j->borrowed ? " borrowed" : "");
		}
		int nq;
		int *ids = queue_order(s, pi, &nq);
		sb_printf(&b, "  queue: %d job%s\n", nq, nq == 1 ? "" : "s");
		for (int k = 0; k < nq && k < 50; k++) {
			const struct job *j = &s->jobs[ids[k]];
			char reason[160];
			tf_sched_job_reason(s, j->id, reason, sizeof(reason));
			tf_sched_shape_str(j->shape, t->ndims, buf, sizeof(buf));
			sb_printf(&b, "    job %d %s prio %d project %s waiting %.0fs: %s\n", j->id,
			          buf, j->prio, s->projects[j->project].name, now - j->submitted,
			          reason);
		}
		if (nq > 50)
			sb_printf(&b, "    ... %d more\n", nq - 50);
		free(ids);
	}
	sb_printf(&b, "\nprojects:\n");
	for (int i = 0; i < s->nprojects; i++) {
		struct tf_sched_usage u;
		const struct project *pr = &s->projects[i];
		tf_sched_project_usage(s, pr->name, now, &u);
		if (pr->quota)
			snprintf(buf, sizeof(buf), "%d", pr->quota);
		else
			snprintf(buf, sizeof(buf), "none");
		sb_printf(&b,
		          "  %-16s weight %-5g quota %-6s running %d chips, %.0f chip-s, %.0f "
		          "slice-s, %d jobs\n",
		          pr->name, pr->weight, buf, u.running_chips, u.chip_seconds,
		          u.slice_seconds, u.jobs);
	}
	free(letter_of);
	if (!b.p)
		return tf_xstrdup("");
	return b.p;
}
