/* sim.c — replays a seeded workload through the scheduler on a simulated clock (an event
 * heap of arrivals, finishes, checkpoint-releases, chip failures and repairs) and measures
 * the scheduler with the caller's clock. Everything is decided by the seed except timing. */
#include "scheduler/sim.h"
#include "scheduler/sched_int.h"
#include "common/common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: small, seedable, identical on every platform. */
static uint64_t rnd_next(uint64_t *st)
{
	uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double rnd_unit(uint64_t *st)
{
	return (double)(rnd_next(st) >> 11) * (1.0 / 9007199254740992.0);
}

enum ev_kind { EV_FINISH, EV_RELEASE, EV_FAIL, EV_REPAIR };

struct event {
	double t;          /* simulated time */
	enum ev_kind kind; /* what happens */
	int job;           /* FINISH / RELEASE: job id; FAIL / REPAIR: chip */
	int attempt; /* FINISH / RELEASE: the attempt it belongs to (stale ones are dropped) */
};

struct heap {
	struct event *v;
	size_t n, cap;
};

static void heap_push(struct heap *h, struct event e)
{
	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 256;
		h->v = tf_xrealloc(h->v, h->cap * sizeof(*h->v));
	}
	size_t i = h->n++;
	while (i > 0 && h->v[(i - 1) / 2].t > e.t) {
		h->v[i] = h->v[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->v[i] = e;
}

static struct event heap_pop(struct heap *h)
{
	struct event top = h->v[0], last = h->v[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1].t < h->v[c].t)
			c++;
		if (h->v[c].t >= last.t)
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

struct simjob {
	double arrive;  /* submit time */
	char slice[32]; /* "v4:2x2x4" */
	int prio, preemptible, project;
	double est;       /* estimate given to the scheduler */
	double remaining; /* work left (seconds) */
	int id;           /* scheduler id */
	double started;   /* start of the current attempt */
};

/* The slice mix: many small jobs, a few pod-scale ones (weights per 100). */
static const struct {
	int s[3];
	int weight;
} mix3[] = {{{2, 2, 1}, 30}, {{2, 2, 2}, 20}, {{2, 2, 4}, 15}, {{2, 4, 4}, 12}, {{4, 4, 4}, 10},
            {{4, 4, 8}, 6},  {{4, 8, 8}, 4},  {{8, 8, 8}, 2},  {{8, 8, 16}, 1}},
  mix2[] = {{{1, 1, 1}, 20}, {{2, 2, 1}, 25}, {{2, 4, 1}, 20}, {{4, 4, 1}, 15},
            {{4, 8, 1}, 10}, {{8, 8, 1}, 6},  {{8, 16, 1}, 3}, {{16, 16, 1}, 1}};

static const struct {
	const char *name;
	double weight;
	double quota; /* fraction of the pool */
} sim_projects[] = {
    {"research", 4, 0.45}, {"prod", 2, 0.30}, {"team-a", 1, 0.15}, {"team-b", 1, 0.15}};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* FNV-1a, 64-bit, over the bytes of v. */
static uint64_t fnv(uint64_t h, const void *v, size_t n)
{
	const unsigned char *b = v;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001B3ull;
	return h;
}

/* Adds the decisions of one scheduler call at `now` to the trace digest, field by field (no
 * padding bytes). */
static uint64_t trace_add(uint64_t h, double now, const struct tf_sched_decisions *d)
{
	for (size_t k = 0; k < d->n; k++) {
		const struct tf_sched_decision *x = &d->v[k];
		const int f[11] = {(int)x->action,   x->job,           x->attempt,
		                   x->pool,          x->box.origin[0], x->box.origin[1],
		                   x->box.origin[2], x->box.shape[0],  x->box.shape[1],
		                   x->box.shape[2],  x->chips};
		h = fnv(h, &now, sizeof(now));
		h = fnv(h, f, sizeof(f));
		h = fnv(h, &x->deadline, sizeof(x->deadline));
		h = fnv(h, &x->cause, sizeof(x->cause));
	}
	return h;
}

/* Checkpoints every 10 simulated minutes: what an interrupted attempt keeps. */
#define SIM_CKPT_EVERY 600.0
/* Time a preempted job takes to checkpoint and exit (within the 30 s grace). */
#define SIM_CKPT_TIME 10.0

int tf_sched_simulate(const struct tf_sched_sim_opts *o, struct tf_sched_sim_result *r, char *err,
                      size_t errlen)
{
	struct tf_sched_config cfg;
	tf_sched_config_default(&cfg);
	cfg.policy = o->policy;
	struct tf_sched *s;
	tf_sched_new(&cfg, &s);
	int rc = tf_sched_add_pool(s, "pod", o->pool, err, errlen);
	if (rc < 0) {
		tf_sched_free(s);
		return rc;
	}
	const struct tf_torus *t = tf_sched_pool_torus(s, 0);
	const char *gen = s->pools[0].tpu_gen;
	for (size_t i = 0; i < TF_ARRAY_LEN(sim_projects); i++)
		tf_sched_set_project(s, sim_projects[i].name, sim_projects[i].weight,
		                     (int)(sim_projects[i].quota * t->nchips), 1);

	/* the workload */
	uint64_t st = o->seed * 0x2545F4914F6CDD1Dull + 1;
	int n = o->jobs > 0 ? o->jobs : 1;
	struct simjob *jobs = tf_xcalloc((size_t)n, sizeof(*jobs));
	double work = 0;
	int total_w = 0;
	const int is3 = t->ndims == 3;
	const size_t nmix = is3 ? TF_ARRAY_LEN(mix3) : TF_ARRAY_LEN(mix2);
	for (size_t k = 0; k < nmix; k++) {
		const int *sh = is3 ? mix3[k].s : mix2[k].s;
		if (sh[0] <= t->dims[0] && sh[1] <= t->dims[1] && sh[2] <= t->dims[2])
			total_w += is3 ? mix3[k].weight : mix2[k].weight;
	}
	for (int i = 0; i < n; i++) {
		struct simjob *j = &jobs[i];
		int pick = (int)(rnd_unit(&st) * total_w);
		const int *sh = NULL;
		for (size_t k = 0; k < nmix; k++) {
			const int *c = is3 ? mix3[k].s : mix2[k].s;
			if (c[0] > t->dims[0] || c[1] > t->dims[1] || c[2] > t->dims[2])
				continue;
			sh = c;
			pick -= is3 ? mix3[k].weight : mix2[k].weight;
			if (pick < 0)
				break;
		}
		if (is3)
			snprintf(j->slice, sizeof(j->slice), "%s:%dx%dx%d", gen, sh[0], sh[1],
			         sh[2]);
		else
			snprintf(j->slice, sizeof(j->slice), "%s:%dx%d", gen, sh[0], sh[1]);
		double u = rnd_unit(&st);
		j->prio = u < 0.70 ? 2 : u < 0.95 ? 5 : 8;
		j->preemptible = j->prio == 2 || (j->prio == 5 && rnd_unit(&st) < 0.5);
		j->project = (int)(rnd_unit(&st) * TF_ARRAY_LEN(sim_projects));
		/* a job beyond its project's whole quota runs only by borrowing */
		if (sh[0] * sh[1] * sh[2] > (int)(sim_projects[j->project].quota * t->nchips))
			j->preemptible = 1;
		j->est = exp(log(300) + rnd_unit(&st) * (log(14400) - log(300)));
		j->remaining = j->est * (0.3 + 0.7 * rnd_unit(&st));
		work += j->remaining * sh[0] * sh[1] * sh[2];
	}
	double load = o->load > 0 ? o->load : 1.2;
	double span = work / (t->nchips * load), now = 0;
	for (int i = 0; i < n; i++) {
		now += -log(1 - rnd_unit(&st)) * span / n;
		jobs[i].arrive = now;
	}
	struct heap h = {0};
	for (int i = 0; i < o->failures; i++) {
		double ft = rnd_unit(&st) * span;
		int chip = (int)(rnd_unit(&st) * t->nchips);
		heap_push(&h, (struct event){ft, EV_FAIL, chip, 0});
		heap_push(&h, (struct event){ft + 3600, EV_REPAIR, chip, 0});
	}
	int *by_id = tf_xcalloc((size_t)n + 2, sizeof(int));

	/* the replay */
	memset(r, 0, sizeof(*r));
	r->policy = o->policy;
	r->jobs = n;
	r->trace_digest = 0xCBF29CE484222325ull; /* FNV offset basis */
	struct tf_sched_decisions d = {0};
	double sched_t = 0, busy_area = 0, last = jobs[0].arrive, frag_sum = 0, end_time = 0;
	double healthy_area = 0;
	int next = 0, frag_samples = 0;
	char e2[160];
#define TIMED(call)                                                                                \
	do {                                                                                       \
		double t0_ = o->clock ? o->clock() : 0;                                            \
		call;                                                                              \
		sched_t += o->clock ? o->clock() - t0_ : 0;                                        \
	} while (0)
	while (next < n || h.n) {
		if (next >= n && r->completed == n)
			break; /* only repairs left: the workload is over */
		now = next < n ? jobs[next].arrive : h.v[0].t;
		if (h.n && h.v[0].t < now)
			now = h.v[0].t;
		busy_area += (double)s->pools[0].busy_chips * (now - last);
		healthy_area += (double)(t->nchips - s->pools[0].failed_chips) * (now - last);
		last = now;
		while (next < n && jobs[next].arrive <= now) {
			struct tf_sched_job_spec sp = {.slice = jobs[next].slice,
			                               .project =
			                                   sim_projects[jobs[next].project].name,
			                               .priority = jobs[next].prio,
			                               .preemptible = jobs[next].preemptible,
			                               .est_seconds = jobs[next].est};
			int id = 0;
			TIMED(rc = tf_sched_submit(s, &sp, now, &id, e2, sizeof(e2)));
			if (rc == 0) {
				jobs[next].id = id;
				by_id[id] = next;
			}
			next++;
		}
		while (h.n && h.v[0].t <= now) {
			struct event e = heap_pop(&h);
			struct simjob *j = e.kind <= EV_RELEASE ? &jobs[by_id[e.job]] : NULL;
			const struct job *sj = e.kind <= EV_RELEASE ? &s->jobs[e.job] : NULL;
			switch (e.kind) {
			case EV_FINISH:
				if (sj->attempts != e.attempt ||
				    (sj->state != TF_JOB_RUNNING && sj->state != TF_JOB_DRAINING))
					break;
				TIMED(tf_sched_finish(s, e.job, now, 1));
				j->remaining = 0;
				r->completed++;
				end_time = now;
				break;
			case EV_RELEASE:
				if (sj->attempts != e.attempt || sj->state != TF_JOB_DRAINING)
					break;
				j->remaining -= now - j->started; /* checkpointed on request */
				TIMED(tf_sched_requeue(s, e.job, now));
				break;
			case EV_FAIL:
				TIMED(tf_sched_chip_fail(s, 0, e.job, now, &d));
				r->trace_digest = trace_add(r->trace_digest, now, &d);
				for (size_t k = 0; k < d.n; k++) {
					struct simjob *v = &jobs[by_id[d.v[k].job]];
					v->remaining -= floor((now - v->started) / SIM_CKPT_EVERY) *
					                SIM_CKPT_EVERY;
					r->infra_failures++;
				}
				break;
			case EV_REPAIR:
				TIMED(tf_sched_chip_repair(s, 0, e.job));
				break;
			}
		}
		TIMED(tf_sched_tick(s, now, &d));
		r->ticks++;
		r->trace_digest = trace_add(r->trace_digest, now, &d);
		for (size_t k = 0; k < d.n; k++) {
			const struct tf_sched_decision *x = &d.v[k];
			struct simjob *j = &jobs[by_id[x->job]];
			switch (x->action) {
			case TF_SCHED_START:
				j->started = now;
				heap_push(&h, (struct event){now + j->remaining, EV_FINISH, x->job,
				                             x->attempt});
				break;
			case TF_SCHED_PREEMPT:
				r->preemptions++;
				heap_push(&h, (struct event){now + SIM_CKPT_TIME, EV_RELEASE,
				                             x->job, x->attempt});
				break;
			case TF_SCHED_KILL:
				r->kills++;
				j->remaining -=
				    floor((now - j->started) / SIM_CKPT_EVERY) * SIM_CKPT_EVERY;
				break;
			default:
				break;
			}
		}
		if (r->ticks % 256 == 0 && s->pools[0].busy_chips < t->nchips) {
			frag_sum += tf_sched_fragmentation(s, 0);
			frag_samples++;
		}
	}
#undef TIMED
	r->decisions = s->decisions;
	r->sched_seconds = sched_t;
	r->decisions_per_second = sched_t > 0 ? (double)s->decisions / sched_t : 0;
	r->makespan = end_time - jobs[0].arrive;
	r->utilization = healthy_area > 0 ? work / healthy_area : 0;
	r->busy_fraction = healthy_area > 0 ? busy_area / healthy_area : 0;
	r->fragmentation = frag_samples ? frag_sum / frag_samples : 0;
	double *waits = tf_xmalloc((size_t)n * sizeof(double));
	for (int prio = 0; prio <= TF_SCHED_PRIO_MAX; prio++) {
		int m = 0;
		double sum = 0;
		for (int i = 0; i < n; i++) {
			const struct job *sj = &s->jobs[jobs[i].id];
			if (!jobs[i].id || sj->prio != prio || sj->first_start < 0)
				continue;
			waits[m++] = sj->first_start - sj->submitted;
			sum += sj->first_start - sj->submitted;
		}
		r->wait_jobs[prio] = m;
		if (!m)
			continue;
		qsort(waits, (size_t)m, sizeof(double), cmp_double);
		r->wait_mean[prio] = sum / m;
		r->wait_p95[prio] = waits[(size_t)ceil(0.95 * m) - 1];
	}
	free(waits);
	free(by_id);
	free(jobs);
	free(h.v);
	tf_sched_decisions_release(&d);
	tf_sched_free(s);
	return 0;
}
