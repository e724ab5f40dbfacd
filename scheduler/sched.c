/* sched.c — the scheduler's decisions: pools, the queue (priority, fair share, FIFO), quotas
 * with borrowing, gang placement, EASY backfill, preemption, chip failures and accounting.
 * One file of about 1,800 lines on purpose: every stage of a tick reads and writes the same
 * pools, queues and job records under the invariants of sched_int.h; split, those internals
 * would pass from file to file and the order of a tick would no longer read in one place.
 *
 * One tick, per pool:
 *  1. drained-out victims whose grace ended are killed (KILL) and requeued;
 *  2. jobs waiting on preempted victims start once their target box is clear;
 *  3. the queue is walked in order — priority high to low; within a priority first the jobs
 *     within their project's quota, then the preemptible jobs of projects allowed to borrow, on
 *     whatever is left; each of those by fair-share key, (held chips + decayed usage /
 *     half-life) / weight, then FIFO within a project; a job that cannot get its quota holds it
 *     against its project's jobs behind it for the rest of the walk;
 *  4. a job that fits starts at the placement touching the most busy chips and edges;
 *  5. a job that does not fit, or is over its quota and may not borrow, may preempt: jobs on
 *     borrowed capacity first (reclaim), then its own project's lower-priority jobs (which
 *     also give quota back), then other projects' lower-priority jobs, on the box that
 *     disturbs the fewest chips of each class in turn; a job that can neither start nor
 *     preempt for want of chips becomes the head: FIFO stops there, backfill computes its
 *     reservation (the earliest time and box it fits if running jobs end at their estimates)
 *     and lets later jobs start only if they end before that time or stay off the reserved box
 *     (EASY backfill).
 *
 * Speed: placement results are memoised per requested shape while the pool's occupancy
 * generation is unchanged (ten thousand queued jobs share a few dozen shapes), the head's
 * reservation is kept while nothing that could move it changed (epoch), and the walk stops
 * after examining backfill_depth jobs, after its first pass has passed backfill_depth jobs
 * (skipped ones count, and the second pass goes no further than the first went, so the work
 * of a tick is bounded whatever the length of the queue), or as soon as no chip is free.
 */
#include "scheduler/sched_int.h"
#include "accel/tpu.h"
#include "common/common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ---- */

const char *tf_sched_state_name(enum tf_sched_job_state st)
{
	static const char *const names[] = {"queued", "running", "draining",
	                                    "done",   "failed",  "cancelled"};
	return st < TF_JOB_STATE_LAST ? names[st] : "?";
}

const char *tf_sched_policy_name(enum tf_sched_policy p)
{
	return p == TF_SCHED_FIFO ? "fifo" : p == TF_SCHED_BACKFILL ? "backfill" : "?";
}

int tf_sched_policy_parse(const char *name, enum tf_sched_policy *out)
{
	if (!strcmp(name, "fifo"))
		*out = TF_SCHED_FIFO;
	else if (!strcmp(name, "backfill"))
		*out = TF_SCHED_BACKFILL;
	else
		return -EINVAL;
	return 0;
}

void tf_sched_shape_str(const int s[3], int ndims, char *buf, size_t len)
{
	if (ndims >= 3)
		snprintf(buf, len, "%dx%dx%d", s[0], s[1], s[2]);
	else
		snprintf(buf, len, "%dx%d", s[0], s[1]);
}

/* ---- lifecycle ---- */

void tf_sched_config_default(struct tf_sched_config *cfg)
{
	*cfg = (struct tf_sched_config){.policy = TF_SCHED_BACKFILL,
	                                .grace_seconds = 30,
	                                .default_estimate = 3600,
	                                .fair_half_life = 3600,
	                                .backfill_depth = 1000,
	                                .preemption = 1};
}

int tf_sched_new(const struct tf_sched_config *cfg, struct tf_sched **out)
{
	struct tf_sched *s = tf_xcalloc(1, sizeof(*s));
	if (cfg)
		s->cfg = *cfg;
	else
		tf_sched_config_default(&s->cfg);
	if (s->cfg.backfill_depth <= 0)
		s->cfg.backfill_depth = 1000;
	if (s->cfg.fair_half_life <= 0)
		s->cfg.fair_half_life = 3600;
	if (s->cfg.default_estimate <= 0)
		s->cfg.default_estimate = 3600;
	s->capjobs = 64;
	s->jobs = tf_xcalloc((size_t)s->capjobs, sizeof(struct job));
	s->stamp = tf_xcalloc((size_t)s->capjobs, sizeof(int));
	s->njobs = 1; /* id 0 is "none" */
	s->last_accrue = NAN;
	*out = s;
	return 0;
}

void tf_sched_free(struct tf_sched *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->npools; i++) {
		struct pool *p = &s->pools[i];
		free(p->name);
		tf_torus_release(&p->t);
		free(p->busy);
		free(p->failed);
		free(p->reserved);
		free(p->free);
		free(p->scratch);
		free(p->scratch2);
		free(p->owner);
		for (int k = 0; k < p->nq_projects * NPRIO; k++)
			free(p->q[k].v);
		free(p->q);
		free(p->running);
		free(p->targets);
	}
	free(s->pools);
	for (int i = 0; i < s->nprojects; i++)
		free(s->projects[i].name);
	free(s->projects);
	free(s->cursor);
	free(s->qhold);
	for (int i = 0; i < s->nruns; i++)
		free(s->runs[i].name);
	free(s->runs);
	for (int i = 1; i < s->njobs; i++) {
		free(s->jobs[i].name);
		free(s->jobs[i].run);
	}
	free(s->jobs);
	free(s->stamp);
	free(s);
}

void tf_sched_decisions_release(struct tf_sched_decisions *d)
{
	if (!d)
		return;
	free(d->v);
	d->v = NULL;
	d->n = d->cap = 0;
}

static void push(struct tf_sched *s, struct tf_sched_decisions *out, struct tf_sched_decision d)
{
	s->decisions++;
	if (!out)
		return;
	if (out->n == out->cap) {
		out->cap = out->cap ? out->cap * 2 : 16;
		out->v = tf_xrealloc(out->v, out->cap * sizeof(*out->v));
	}
	out->v[out->n++] = d;
}

/* ---- slices and pools ---- */

/* Generation wiring (Cloud TPU system architecture docs): v4 and v5p are 3D tori built from
 * 4x4x4 cubes joined by optical switches, so a dimension that is a multiple of 4 closes into a
 * ring; the 2D generations (v2, v3, v5e, v6e) are tori whose rings close only at the full pod
 * edge (sqrt of the largest pod: 16 or 32 chips). Hosts hold 4 chips (2x2x1) on generations
 * with 2 TensorCores per chip and 8 chips (4x2) on the single-core v5e and v6e. */
static int wraps(const struct tf_tpu_gen *g, int extent)
{
	if (g->torus_dims == 3)
		return extent % 4 == 0;
	int edge = (int)lrint(sqrt((double)g->max_chips));
	return extent == edge;
}

static void host_dims(const struct tf_tpu_gen *g, int host[3])
{
	for (int i = 0; i < 3; i++)
		host[i] = g->host_dims[i];
}

/* "AxB" or "AxBxC" into dims (missing dims 1); returns the number of dims or -EINVAL. */
static int parse_dims(const char *p, int dims[3])
{
	int n = 0;
	dims[0] = dims[1] = dims[2] = 1;
	while (*p) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 1 || v > 4096 || n == 3)
			return -EINVAL;
		dims[n++] = (int)v;
		if (*end == 'x')
			end++;
		else if (*end)
			return -EINVAL;
		p = end;
	}
	return n >= 1 ? n : -EINVAL;
}

/* A job's slice: a Cloud TPU type ("v4-8", "v5litepod-16") or topology ("v4:2x2x4") as
 * accel/tpu.h parses them (tf_tpu_shape_parse: any sub-mesh shape), or a bare shape "AxB[xC]" (any
 * generation; gen set to ""). */
static int parse_slice(const char *spec, char gen[16], int shape[3], char *err, size_t errlen)
{
	gen[0] = '\0';
	if (parse_dims(spec, shape) >= 0)
		return 0;
	struct tf_tpu_slice sl;
	if (tf_tpu_shape_parse(spec, &sl, err, errlen) < 0)
		return -EINVAL;
	snprintf(gen, 16, "%s", sl.gen->name);
	memcpy(shape, sl.dims, sizeof(sl.dims));
	return 0;
}

static void ensure_queues(struct tf_sched *s);

int tf_sched_add_pool(struct tf_sched *s, const char *name, const char *spec, char *err,
                      size_t errlen)
{
	const char *colon = strchr(spec, ':');
	char gen[16];
	int dims[3];
	size_t gl = colon ? (size_t)(colon - spec) : 0;
	if (!colon || gl == 0 || gl >= sizeof(gen)) {
		tf_errf(err, errlen,
		        "bad pool '%s': write GEN:AxBxC, e.g. 'v4:4x4x8' or 'v5e:16x16'", spec);
		return -EINVAL;
	}
	memcpy(gen, spec, gl);
	gen[gl] = '\0';
	const struct tf_tpu_gen *w = tf_tpu_gen_find(gen);
	if (!w) {
		tf_errf(err, errlen,
		        "unknown TPU generation '%s' in pool '%s': use v2, v3, v4, v5p, "
		        "v5e or v6e",
		        gen, spec);
		return -EINVAL;
	}
	int nd = parse_dims(colon + 1, dims);
	if (nd != w->torus_dims) {
		tf_errf(err, errlen, "bad pool '%s': %s is a %dD torus, write %s", spec, w->name,
		        w->torus_dims, w->torus_dims == 3 ? "AxBxC" : "AxB");
		return -EINVAL;
	}
	if (name) {
		for (int i = 0; i < s->npools; i++)
			if (!strcmp(s->pools[i].name, name)) {
				tf_errf(err, errlen, "pool '%s' already exists: pick another name",
				        name);
				return -EINVAL;
			}
	}
	int wrap[3];
	for (int d = 0; d < 3; d++)
		wrap[d] = wraps(w, dims[d]);
	struct tf_torus t;
	if (tf_torus_init(&t, nd, dims, wrap) < 0) {
		tf_errf(err, errlen,
		        "pool '%s' is too large: at most 64 chips along x and 65536 "
		        "chips in all",
		        spec);
		return -EINVAL;
	}
	s->pools = tf_xrealloc(s->pools, (size_t)(s->npools + 1) * sizeof(*s->pools));
	struct pool *p = &s->pools[s->npools];
	memset(p, 0, sizeof(*p));
	p->t = t;
	p->name = name ? tf_xstrdup(name) : tf_xasprintf("%s", spec);
	snprintf(p->tpu_gen, sizeof(p->tpu_gen), "%s", w->name);
	snprintf(p->spec, sizeof(p->spec), "%s", spec);
	host_dims(w, p->host);
	size_t nr = (size_t)t.nrows;
	p->busy = tf_xcalloc(nr, sizeof(uint64_t));
	p->failed = tf_xcalloc(nr, sizeof(uint64_t));
	p->reserved = tf_xcalloc(nr, sizeof(uint64_t));
	p->free = tf_xcalloc(nr, sizeof(uint64_t));
	p->scratch = tf_xcalloc(nr, sizeof(uint64_t));
	p->scratch2 = tf_xcalloc(nr, sizeof(uint64_t));
	for (size_t r = 0; r < nr; r++)
		p->free[r] = t.xmask;
	p->owner = tf_xcalloc((size_t)t.nchips, sizeof(int));
	p->gen = 1;
	p->epoch = 1;
	p->grow = 1;
	s->npools++;
	ensure_queues(s); /* projects may exist already: give the new pool their queues */
	return s->npools - 1;
}

int tf_sched_pool_count(const struct tf_sched *s)
{
	return s->npools;
}

const struct tf_torus *tf_sched_pool_torus(const struct tf_sched *s, int pool)
{
	return pool >= 0 && pool < s->npools ? &s->pools[pool].t : NULL;
}

const char *tf_sched_pool_name(const struct tf_sched *s, int pool)
{
	return pool >= 0 && pool < s->npools ? s->pools[pool].name : NULL;
}

const char *tf_sched_pool_spec(const struct tf_sched *s, int pool)
{
	return pool >= 0 && pool < s->npools ? s->pools[pool].spec : NULL;
}

int tf_sched_chip_host(const struct tf_sched *s, int pool, int chip)
{
	if (pool < 0 || pool >= s->npools)
		return -ENOENT;
	const struct pool *p = &s->pools[pool];
	const int *D = p->t.dims;
	if (chip < 0 || chip >= p->t.nchips)
		return -EINVAL;
	int x = chip % D[0], y = (chip / D[0]) % D[1], z = chip / (D[0] * D[1]);
	int hx = (D[0] + p->host[0] - 1) / p->host[0], hy = (D[1] + p->host[1] - 1) / p->host[1];
	return x / p->host[0] + hx * (y / p->host[1] + hy * (z / p->host[2]));
}

/* ---- projects and runs ---- */

static void ensure_queues(struct tf_sched *s)
{
	for (int i = 0; i < s->npools; i++) {
		struct pool *p = &s->pools[i];
		if (p->nq_projects >= s->nprojects)
			continue;
		int n = s->nprojects + 8;
		p->q = tf_xrealloc(p->q, (size_t)n * NPRIO * sizeof(struct qlist));
		memset(p->q + (size_t)p->nq_projects * NPRIO, 0,
		       (size_t)(n - p->nq_projects) * NPRIO * sizeof(struct qlist));
		p->nq_projects = n;
	}
}

static int project_find(const struct tf_sched *s, const char *name)
{
	for (int i = 0; i < s->nprojects; i++)
		if (!strcmp(s->projects[i].name, name))
			return i;
	return -1;
}

static int project_get(struct tf_sched *s, const char *name)
{
	int i = project_find(s, name);
	if (i >= 0)
		return i;
	s->projects = tf_xrealloc(s->projects, (size_t)(s->nprojects + 1) * sizeof(*s->projects));
	s->projects[s->nprojects] = (struct project){.name = tf_xstrdup(name), .weight = 1};
	i = s->nprojects++;
	s->cursor = tf_xrealloc(s->cursor, (size_t)s->nprojects * sizeof(int));
	s->qhold = tf_xrealloc(s->qhold, (size_t)s->nprojects * sizeof(int));
	s->qhold[i] = 0;
	ensure_queues(s);
	return i;
}

int tf_sched_set_project(struct tf_sched *s, const char *name, double weight, int quota_chips,
                         int may_borrow)
{
	if (!name || !*name || !(weight > 0) || quota_chips < 0)
		return -EINVAL;
	int pi = project_get(s, name); /* may move s->projects */
	struct project *pr = &s->projects[pi];
	pr->weight = weight;
	pr->quota = quota_chips;
	pr->may_borrow = may_borrow != 0;
	return 0;
}

static int run_find(const struct tf_sched *s, const char *run)
{
	for (int i = 0; i < s->nruns; i++)
		if (!strcmp(s->runs[i].name, run))
			return i;
	return -1;
}

static int run_get(struct tf_sched *s, const char *run)
{
	int i = run_find(s, run);
	if (i >= 0)
		return i;
	s->runs = tf_xrealloc(s->runs, (size_t)(s->nruns + 1) * sizeof(*s->runs));
	s->runs[s->nruns] = (struct run_acct){.name = tf_xstrdup(run)};
	return s->nruns++;
}

/* Decays fair-share usage to `now`, adding what running jobs used since the last call. */
static void accrue(struct tf_sched *s, double now)
{
	if (isnan(s->last_accrue) || now <= s->last_accrue) {
		if (isnan(s->last_accrue))
			s->last_accrue = now;
		return;
	}
	double dt = now - s->last_accrue, f = exp2(-dt / s->cfg.fair_half_life);
	for (int i = 0; i < s->nprojects; i++) {
		struct project *pr = &s->projects[i];
		pr->decayed = pr->decayed * f + pr->running_chips * dt;
	}
	s->last_accrue = now;
}

static void project_key(struct tf_sched *s, struct project *pr)
{
	pr->key = (pr->running_chips + pr->decayed / s->cfg.fair_half_life) / pr->weight;
}

/* ---- state changes ---- */

/* The transition table: whether the diagram in sched.h has j's state -> to. The public
 * operations ask it before they act (tf_sched_finish, tf_sched_cancel, tf_sched_drain_at), so
 * it is what refuses a wrong call; the internal moves assert it. */
static int may_move(const struct job *j, enum tf_sched_job_state to)
{
	static const unsigned allowed[TF_JOB_STATE_LAST] = {
	    [TF_JOB_QUEUED] = 1u << TF_JOB_RUNNING | 1u << TF_JOB_CANCELLED,
	    [TF_JOB_RUNNING] = 1u << TF_JOB_DONE | 1u << TF_JOB_FAILED | 1u << TF_JOB_DRAINING |
	                       1u << TF_JOB_QUEUED | 1u << TF_JOB_CANCELLED,
	    [TF_JOB_DRAINING] = 1u << TF_JOB_QUEUED | 1u << TF_JOB_CANCELLED | 1u << TF_JOB_DONE |
	                        1u << TF_JOB_FAILED,
	};
	return (allowed[j->state] & (1u << to)) != 0;
}

/* The only place a job changes state; refuses transitions the table lacks. */
static int set_state(struct job *j, enum tf_sched_job_state to)
{
	if (!may_move(j, to))
		return -EINVAL;
	j->state = to;
	return 0;
}

static struct qlist *qlist_of(struct tf_sched *s, const struct job *j)
{
	return &s->pools[j->pool].q[j->project * NPRIO + j->prio];
}

/* The first entry of q (from q->lo) whose id is >= id (q->n: none). */
static int qent_find(const struct qlist *q, int id)
{
	int lo = q->lo, hi = q->n;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (q->v[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The live entry of a queued job. */
static struct qent *qent_of(struct tf_sched *s, const struct job *j)
{
	struct qlist *q = qlist_of(s, j);
	int i = qent_find(q, j->id);
	TF_ASSERT(i < q->n && q->v[i].id == j->id && (q->v[i].flags & QE_LIVE));
	return &q->v[i];
}

/* The first live entry at or after index i (q->n: none). */
static int qent_live(const struct qlist *q, int i)
{
	while (i < q->n && !(q->v[i].flags & QE_LIVE))
		i++;
	return i;
}

/* Drops the dead entries of q, moving the live ones before the last dead one towards it
 * (jobs start near the front of a list, so that is a short stretch; the freed room at the
 * front takes requeued jobs). Never during a walk: it moves entries. */
static void qlist_compact(struct qlist *q)
{
	int k = q->dead_hi + 1;
	for (int i = q->dead_hi; i >= q->lo; i--)
		if (q->v[i].flags & QE_LIVE)
			q->v[--k] = q->v[i];
	q->lo = k;
	q->dead = 0;
}

/* Queue lists are ordered by seq, so a requeued job goes back to where it was: into its own
 * dead entry while the list still has it, else in its place among the others. Never during a
 * walk (tf_sched_submit, and requeues outside schedule_pool). */
static void queue_insert(struct tf_sched *s, struct job *j)
{
	struct qlist *q = qlist_of(s, j);
	struct qent e = {.id = j->id,
	                 .chips = j->chips,
	                 .sid = (short)j->sid,
	                 .flags = (unsigned short)(QE_LIVE | (j->preemptible ? QE_PREEMPTIBLE : 0) |
	                                           (j->has_target ? QE_TARGET : 0))};
	int i = qent_find(q, j->id);
	if (i < q->n && q->v[i].id == j->id) {
		TF_ASSERT(!(q->v[i].flags & QE_LIVE));
		q->v[i] = e;
		q->dead--;
	} else {
		if (q->lo > 0 && i - q->lo < q->n - i) {
			/* nearer the front, where a removed job left room: shift the front */
			memmove(&q->v[q->lo - 1], &q->v[q->lo], (size_t)(i - q->lo) * sizeof(e));
			q->lo--;
			i--;
		} else {
			if (q->n == q->cap) {
				q->cap = q->cap ? q->cap * 2 : 16;
				q->v = tf_xrealloc(q->v, (size_t)q->cap * sizeof(e));
			}
			memmove(&q->v[i + 1], &q->v[i], (size_t)(q->n - i) * sizeof(e));
			q->n++;
			if (q->dead && q->dead_hi >= i)
				q->dead_hi++; /* the dead entries moved with the rest */
		}
		q->v[i] = e;
	}
	s->pools[j->pool].queued++;
}

/* Leaves a dead entry behind: a walk in progress keeps its positions. */
static void queue_remove(struct tf_sched *s, struct job *j)
{
	struct qlist *q = qlist_of(s, j);
	struct qent *e = qent_of(s, j);
	e->flags &= (unsigned short)~QE_LIVE;
	if (!q->dead++ || e - q->v > q->dead_hi)
		q->dead_hi = (int)(e - q->v);
	while (q->lo < q->n && !(q->v[q->lo].flags & QE_LIVE)) {
		q->lo++;
		q->dead--;
	}
	if (q->lo == q->n)
		q->lo = q->n = q->dead = 0;
	s->pools[j->pool].queued--;
}

/* Recomputes free rows for a box after busy/failed/reserved changed (invariant 1). */
static void refresh_box(struct pool *p, const struct tf_box *b)
{
	for (int dz = 0; dz < b->shape[2]; dz++)
		for (int dy = 0; dy < b->shape[1]; dy++) {
			int r = (b->origin[1] + dy) % p->t.dims[1] +
			        p->t.dims[1] * ((b->origin[2] + dz) % p->t.dims[2]);
			p->free[r] = ~(p->busy[r] | p->failed[r] | p->reserved[r]) & p->t.xmask;
		}
	p->gen++;
}

static void set_owner(struct pool *p, const struct tf_box *b, int id)
{
	const int *D = p->t.dims;
	for (int dz = 0; dz < b->shape[2]; dz++)
		for (int dy = 0; dy < b->shape[1]; dy++) {
			int base = D[0] * ((b->origin[1] + dy) % D[1] +
			                   D[1] * ((b->origin[2] + dz) % D[2]));
			for (int dx = 0; dx < b->shape[0]; dx++)
				p->owner[base + (b->origin[0] + dx) % D[0]] = id;
		}
}

static void drop_target(struct tf_sched *s, struct job *j)
{
	struct pool *p = &s->pools[j->pool];
	if (!j->has_target)
		return;
	j->has_target = 0;
	qent_of(s, j)->flags &= (unsigned short)~QE_TARGET;
	s->projects[j->project].quota_used -= j->chips;
	tf_torus_box_set(&p->t, p->reserved, &j->target, 0);
	/* other targets never overlap this one, so clearing the box is exact */
	refresh_box(p, &j->target);
	p->grow++;
	for (int i = 0; i < p->ntargets; i++)
		if (p->targets[i] == j->id) {
			p->targets[i] = p->targets[--p->ntargets];
			break;
		}
	p->epoch++;
}

static void start_job(struct tf_sched *s, struct job *j, const struct tf_box *box, double now,
                      int borrowed, int ordered, struct tf_sched_decisions *out)
{
	struct pool *p = &s->pools[j->pool];
	struct project *pr = &s->projects[j->project];
	if (j->has_target)
		drop_target(s, j);
	queue_remove(s, j);
	int moved = set_state(j, TF_JOB_RUNNING);
	TF_ASSERT(moved == 0); /* only queued jobs are started */
	(void)moved;
	j->box = *box;
	j->started = now;
	if (j->first_start < 0)
		j->first_start = now;
	j->attempts++;
	j->borrowed = borrowed;
	tf_torus_box_set(&p->t, p->busy, box, 1);
	refresh_box(p, box);
	set_owner(p, box, j->id);
	p->busy_chips += j->chips;
	if (p->nrunning == p->caprunning) {
		p->caprunning = p->caprunning ? p->caprunning * 2 : 64;
		p->running = tf_xrealloc(p->running, (size_t)p->caprunning * sizeof(int));
	}
	j->run_pos = p->nrunning;
	p->running[p->nrunning++] = j->id;
	pr->running_chips += j->chips;
	if (!borrowed)
		pr->quota_used += j->chips;
	project_key(s, pr);
	if (j->run_idx >= 0)
		s->runs[j->run_idx].running_chips += j->chips;
	if (ordered)
		p->epoch++;
	push(s, out,
	     (struct tf_sched_decision){.action = TF_SCHED_START,
	                                .job = j->id,
	                                .attempt = j->attempts,
	                                .pool = j->pool,
	                                .box = *box,
	                                .chips = j->chips});
}

double tf_sched_job_running_seconds(const struct job *j, double now)
{
	if (j->state != TF_JOB_RUNNING && j->state != TF_JOB_DRAINING)
		return 0;
	return now > j->started ? now - j->started : 0;
}

/* Frees a running or draining job's chips and books its time (accounting). */
static void release_chips(struct tf_sched *s, struct job *j, double now)
{
	struct pool *p = &s->pools[j->pool];
	struct project *pr = &s->projects[j->project];
	double sec = tf_sched_job_running_seconds(j, now);
	j->chip_seconds += sec * j->chips;
	j->slice_seconds += sec;
	pr->chip_seconds += sec * j->chips;
	pr->slice_seconds += sec;
	pr->running_chips -= j->chips;
	if (!j->borrowed)
		pr->quota_used -= j->chips;
	project_key(s, pr);
	if (j->run_idx >= 0) {
		s->runs[j->run_idx].chip_seconds += sec * j->chips;
		s->runs[j->run_idx].slice_seconds += sec;
		s->runs[j->run_idx].running_chips -= j->chips;
	}
	tf_torus_box_set(&p->t, p->busy, &j->box, 0);
	set_owner(p, &j->box, 0);
	refresh_box(p, &j->box);
	p->grow++;
	p->busy_chips -= j->chips;
	int last = p->running[--p->nrunning];
	p->running[j->run_pos] = last;
	s->jobs[last].run_pos = j->run_pos;
	j->run_pos = -1;
	p->epoch++;
}

static void requeue(struct tf_sched *s, struct job *j)
{
	int moved = set_state(j, TF_JOB_QUEUED);
	TF_ASSERT(moved == 0); /* a running or draining job goes back to the queue */
	(void)moved;
	j->borrowed = 0;
	queue_insert(s, j);
}

/* ---- submit ---- */

static int shape_id(struct tf_sched *s, const int shape[3])
{
	for (int i = 0; i < s->nshapes; i++)
		if (!memcmp(s->shapes[i], shape, sizeof(s->shapes[i])))
			return i;
	if (s->nshapes == MAX_SHAPES)
		return -1;
	memcpy(s->shapes[s->nshapes], shape, sizeof(s->shapes[0]));
	return s->nshapes++;
}

/* 1 when some rotation of shape fits the pool's dimensions. */
static int shape_fits_dims(const struct pool *p, const int sh[3])
{
	int a[3], b[3];
	memcpy(a, sh, sizeof(a));
	memcpy(b, p->t.dims, sizeof(b));
	/* sort both ascending: a fits some rotation iff sorted a <= sorted b componentwise */
	for (int i = 0; i < 3; i++)
		for (int k = i + 1; k < 3; k++) {
			if (a[k] < a[i]) {
				int t = a[i];
				a[i] = a[k];
				a[k] = t;
			}
			if (b[k] < b[i]) {
				int t = b[i];
				b[i] = b[k];
				b[k] = t;
			}
		}
	return a[0] <= b[0] && a[1] <= b[1] && a[2] <= b[2];
}

int tf_sched_submit(struct tf_sched *s, const struct tf_sched_job_spec *spec, double now, int *id,
                    char *err, size_t errlen)
{
	char gen[16];
	int shape[3];
	if (!spec || !spec->slice) {
		tf_errf(err, errlen, "job has no slice: give one like 'v4-8' or 'v4:2x2x4'");
		return -EINVAL;
	}
	if (spec->priority < 0 || spec->priority > TF_SCHED_PRIO_MAX) {
		tf_errf(err, errlen, "priority %d of job '%s' is out of range: use 0..%d",
		        spec->priority, spec->name ? spec->name : spec->slice, TF_SCHED_PRIO_MAX);
		return -EINVAL;
	}
	if (parse_slice(spec->slice, gen, shape, err, errlen) < 0)
		return -EINVAL;
	int pool = -1;
	if (spec->pool) {
		for (int i = 0; i < s->npools; i++)
			if (!strcmp(s->pools[i].name, spec->pool))
				pool = i;
		if (pool < 0) {
			tf_errf(err, errlen,
			        "unknown pool '%s': see 'tpuflow slices' for the pools",
			        spec->pool);
			return -EINVAL;
		}
		if (gen[0] && strcmp(gen, s->pools[pool].tpu_gen)) {
			tf_errf(err, errlen, "slice '%s' is %s but pool '%s' is %s: pick a %s pool",
			        spec->slice, gen, spec->pool, s->pools[pool].tpu_gen, gen);
			return -EINVAL;
		}
		if (!shape_fits_dims(&s->pools[pool], shape)) {
			tf_errf(err, errlen,
			        "slice '%s' does not fit pool '%s' (%s) in any rotation",
			        spec->slice, spec->pool, s->pools[pool].spec);
			return -EINVAL;
		}
	} else {
		for (int i = 0; i < s->npools && pool < 0; i++)
			if ((!gen[0] || !strcmp(gen, s->pools[i].tpu_gen)) &&
			    shape_fits_dims(&s->pools[i], shape))
				pool = i;
		if (pool < 0) {
			tf_errf(err, errlen,
			        "no %s pool can hold slice '%s': configure one (e.g. "
			        "'%s:4x4x8')",
			        gen[0] ? gen : "", spec->slice, gen[0] ? gen : "v4");
			return -EINVAL;
		}
	}
	int chips = shape[0] * shape[1] * shape[2];
	int known = project_find(s, spec->project && *spec->project ? spec->project : "default");
	if (known >= 0 && s->projects[known].quota && chips > s->projects[known].quota &&
	    !(spec->preemptible && s->projects[known].may_borrow)) {
		tf_errf(err, errlen,
		        "slice '%s' needs %d chips but project '%s' has a quota of %d: "
		        "raise the quota or submit it preemptible so it may borrow",
		        spec->slice, chips, s->projects[known].name, s->projects[known].quota);
		return -EINVAL;
	}
	if (s->njobs == s->capjobs) {
		s->capjobs *= 2;
		s->jobs = tf_xrealloc(s->jobs, (size_t)s->capjobs * sizeof(struct job));
		s->stamp = tf_xrealloc(s->stamp, (size_t)s->capjobs * sizeof(int));
	}
	int pj = project_get(s, spec->project && *spec->project ? spec->project : "default");
	struct job *j = &s->jobs[s->njobs];
	s->stamp[s->njobs] = 0;
	*j =
	    (struct job){.id = s->njobs,
	                 .state = TF_JOB_QUEUED,
	                 .name = spec->name ? tf_xstrdup(spec->name) : NULL,
	                 .run = spec->run ? tf_xstrdup(spec->run) : NULL,
	                 .project = pj,
	                 .run_idx = spec->run ? run_get(s, spec->run) : -1,
	                 .pool = pool,
	                 .sid = shape_id(s, shape),
	                 .chips = shape[0] * shape[1] * shape[2],
	                 .prio = spec->priority,
	                 .preemptible = spec->preemptible != 0,
	                 .est = spec->est_seconds > 0 ? spec->est_seconds : s->cfg.default_estimate,
	                 .submitted = now,
	                 .seq = s->seq++,
	                 .first_start = -1,
	                 .run_pos = -1};
	memcpy(j->shape, shape, sizeof(j->shape));
	s->njobs++;
	s->projects[pj].jobs++;
	if (j->run_idx >= 0)
		s->runs[j->run_idx].jobs++;
	queue_insert(s, j);
	*id = j->id;
	return 0;
}

/* 1 when shape b is a rotation (permutation) of shape a. */
static int same_shape(const int a[3], const int b[3])
{
	static const int perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
	                               {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
	for (int k = 0; k < 6; k++)
		if (a[perm[k][0]] == b[0] && a[perm[k][1]] == b[1] && a[perm[k][2]] == b[2])
			return 1;
	return 0;
}

int tf_sched_place_at(struct tf_sched *s, int pool, const struct tf_box *box,
                      const struct tf_sched_job_spec *spec, double now, int *id, char *err,
                      size_t errlen)
{
	char gen[16];
	int shape[3];
	if (pool < 0 || pool >= s->npools) {
		tf_errf(err, errlen, "no pool %d: there are %d pools", pool, s->npools);
		return -EINVAL;
	}
	struct pool *p = &s->pools[pool];
	if (!spec || !spec->slice) {
		tf_errf(err, errlen, "job has no slice: give one like 'v4-8' or 'v4:2x2x4'");
		return -EINVAL;
	}
	if (parse_slice(spec->slice, gen, shape, err, errlen) < 0)
		return -EINVAL;
	if (gen[0] && strcmp(gen, p->tpu_gen)) {
		tf_errf(err, errlen, "slice '%s' is %s but pool '%s' is %s: pick a %s pool",
		        spec->slice, gen, p->name, p->tpu_gen, gen);
		return -EINVAL;
	}
	char want[32], got[32];
	tf_sched_shape_str(shape, p->t.ndims, want, sizeof(want));
	tf_sched_shape_str(box->shape, p->t.ndims, got, sizeof(got));
	if (!same_shape(shape, box->shape)) {
		tf_errf(err, errlen, "box %s is not slice '%s' (%s) in any rotation", got,
		        spec->slice, want);
		return -EINVAL;
	}
	for (int d = 0; d < 3; d++) {
		int o = box->origin[d], e = box->shape[d], D = p->t.dims[d];
		if (o < 0 || o >= D || e < 1 || e > D || (o + e > D && !p->t.wrap[d])) {
			tf_errf(err, errlen, "box %s at (%d,%d,%d) does not fit pool '%s' (%s)%s",
			        got, box->origin[0], box->origin[1], box->origin[2], p->name,
			        p->spec,
			        o + e > D && o < D && e <= D ? ": that dimension does not "
			                                       "wrap"
			                                     : "");
			return -EINVAL;
		}
	}
	if (!tf_torus_box_all(&p->t, p->free, box)) {
		/* name the first holder (or say failed / held) */
		const int *D = p->t.dims;
		for (int dz = 0; dz < box->shape[2]; dz++)
			for (int dy = 0; dy < box->shape[1]; dy++)
				for (int dx = 0; dx < box->shape[0]; dx++) {
					int x = (box->origin[0] + dx) % D[0],
					    r = (box->origin[1] + dy) % D[1] +
					        D[1] * ((box->origin[2] + dz) % D[2]);
					if ((p->free[r] >> x) & 1)
						continue;
					int o = p->owner[x + D[0] * r];
					const struct job *h = o ? &s->jobs[o] : NULL;
					if (h)
						tf_errf(err, errlen,
						        "chip (%d,%d,%d) of pool '%s' is held "
						        "by job %d%s%s%s",
						        x, r % D[1], r / D[1], p->name, o,
						        h->name ? " '" : "", h->name ? h->name : "",
						        h->name ? "'" : "");
					else
						tf_errf(err, errlen,
						        "chip (%d,%d,%d) of pool '%s' is %s", x,
						        r % D[1], r / D[1], p->name,
						        (p->failed[r] >> x) & 1
						            ? "failed"
						            : "held for a waiting job");
					return -EBUSY;
				}
	}
	struct tf_sched_job_spec js = *spec;
	js.pool = p->name;
	int jid;
	int rc = tf_sched_submit(s, &js, now, &jid, err, errlen);
	if (rc < 0)
		return rc;
	start_job(s, &s->jobs[jid], box, now, 0, 1, NULL);
	*id = jid;
	return 0;
}

static struct job *job_get(const struct tf_sched *s, int id);
static void set_target(struct tf_sched *s, struct pool *p, struct job *j, const struct tf_box *b);

int tf_sched_drain_at(struct tf_sched *s, int id, double deadline)
{
	struct job *j = job_get(s, id);
	if (!j)
		return -ENOENT;
	if (set_state(j, TF_JOB_DRAINING))
		return -EINVAL;
	j->deadline = deadline;
	j->preemptions++;
	return 0;
}

int tf_sched_hold_at(struct tf_sched *s, int id, const struct tf_box *box)
{
	struct job *j = job_get(s, id);
	if (!j)
		return -ENOENT;
	struct pool *p = &s->pools[j->pool];
	if (j->state != TF_JOB_QUEUED || j->has_target || !same_shape(j->shape, box->shape))
		return -EINVAL;
	for (int d = 0; d < 3; d++) {
		int o = box->origin[d], e = box->shape[d], D = p->t.dims[d];
		if (o < 0 || o >= D || e > D || (o + e > D && !p->t.wrap[d]))
			return -EINVAL;
	}
	memcpy(p->scratch, p->reserved, (size_t)p->t.nrows * sizeof(uint64_t));
	tf_torus_box_set(&p->t, p->scratch, box, 0);
	for (int r = 0; r < p->t.nrows; r++)
		if (p->scratch[r] != p->reserved[r])
			return -EINVAL; /* overlaps another job's box */
	set_target(s, p, j, box);
	return 0;
}

int tf_sched_default_pool(const char *gen, char *spec, size_t len)
{
	const struct tf_tpu_gen *g = tf_tpu_gen_find(gen);
	if (!g)
		return -EINVAL;
	if (g->torus_dims == 3)
		snprintf(spec, len, "%s:%s", g->name, !strcmp(g->name, "v4") ? "4x4x8" : "4x4x4");
	else
		snprintf(spec, len, "%s:16x16", g->name);
	return 0;
}

/* ---- placement ---- */

/* 1 when find_fit's memo knows that no box of shape sid fits (no chip freed since it looked). */
static int memo_no_fit(const struct pool *p, int sid)
{
	return sid >= 0 && p->memo_grow[sid] == p->grow && !p->memo_ok[sid];
}

static int find_fit(struct pool *p, const struct job *j, struct tf_box *box)
{
	if (memo_no_fit(p, j->sid))
		return 0;
	if (j->sid >= 0 && p->memo_grow[j->sid] == p->grow &&
	    tf_torus_box_all(&p->t, p->free, &p->memo_box[j->sid])) {
		*box = p->memo_box[j->sid];
		return 1;
	}
	int ok = 0;
	if (p->t.nchips - p->busy_chips - p->failed_chips >= j->chips)
		ok = tf_torus_find(&p->t, p->free, j->shape, TF_TORUS_BEST, box);
	if (j->sid >= 0) {
		p->memo_grow[j->sid] = p->grow;
		p->memo_ok[j->sid] = (signed char)ok;
		if (ok)
			p->memo_box[j->sid] = *box;
	}
	return ok;
}

/* A fit that leaves the head's reserved box alone. */
static int find_fit_avoiding(struct pool *p, const struct job *j, const struct tf_box *resv,
                             struct tf_box *box)
{
	if (j->sid >= 0 && p->memor_grow[j->sid] == p->grow &&
	    p->memor_resv[j->sid] == p->resv_serial) {
		if (!p->memor_ok[j->sid])
			return 0;
		if (tf_torus_box_all(&p->t, p->free, &p->memor_box[j->sid])) {
			*box = p->memor_box[j->sid];
			return 1;
		}
	}
	memcpy(p->scratch2, p->free, (size_t)p->t.nrows * sizeof(uint64_t));
	tf_torus_box_set(&p->t, p->scratch2, resv, 0);
	int ok = tf_torus_find(&p->t, p->scratch2, j->shape, TF_TORUS_BEST, box);
	if (j->sid >= 0) {
		p->memor_grow[j->sid] = p->grow;
		p->memor_resv[j->sid] = p->resv_serial;
		p->memor_ok[j->sid] = (signed char)ok;
		if (ok)
			p->memor_box[j->sid] = *box;
	}
	return ok;
}

struct ending {
	double end; /* estimated end */
	int id;     /* job */
};

static int by_end(const void *a, const void *b)
{
	const struct ending *x = a, *y = b;
	return x->end < y->end ? -1 : x->end > y->end ? 1 : x->id - y->id;
}

/* scratch = chips usable once the jobs whose boxes are set in `ended` have ended. */
static void avail_after(struct pool *p, const uint64_t *ended)
{
	for (int r = 0; r < p->t.nrows; r++)
		p->scratch[r] = (p->free[r] | ended[r]) & ~(p->failed[r] | p->reserved[r]);
}

/* Adds the boxes of jobs e[from..to) to `ended`. */
static void add_ended(struct tf_sched *s, struct pool *p, const struct ending *e, int from, int to,
                      uint64_t *ended)
{
	for (int i = from; i < to; i++)
		tf_torus_box_set(&p->t, ended, &s->jobs[e[i].id].box, 1);
}

/* EASY reservation for the head job j: the earliest estimated time at which it fits, and the
 * box, assuming every running job ends at its estimate. Cached until the epoch moves. */
static double est_end(const struct job *r, double now)
{
	double end = r->state == TF_JOB_DRAINING ? r->deadline : r->started + r->est;
	return end > now ? end : now;
}

/* 1 while the reserved box will still be clear by the reserved time: no failed or drained-for
 * chip in it, and every job in it is estimated to end by then. */
static int resv_feasible(const struct tf_sched *s, const struct pool *p, double now)
{
	const struct tf_box *b = &p->resv_box;
	const int *D = p->t.dims;
	for (int dz = 0; dz < b->shape[2]; dz++)
		for (int dy = 0; dy < b->shape[1]; dy++) {
			int r = (b->origin[1] + dy) % D[1] + D[1] * ((b->origin[2] + dz) % D[2]);
			for (int dx = 0; dx < b->shape[0]; dx++) {
				int x = (b->origin[0] + dx) % D[0];
				if (((p->failed[r] | p->reserved[r]) >> x) & 1)
					return 0;
				int o = p->owner[D[0] * r + x];
				if (o && est_end(&s->jobs[o], now) > p->resv_time)
					return 0;
			}
		}
	return 1;
}

/* How long a still-feasible reservation is kept before it is recomputed to catch jobs that
 * ended early (Slurm's backfill likewise runs every bf_interval, 30 s by default). Keeping it
 * never moves the head later than promised: it is recomputed at once when it turns
 * infeasible or the head changes. */
#define RESV_REFRESH 30.0

static void reserve(struct tf_sched *s, struct pool *p, const struct job *j, double now)
{
	if (p->resv_job == j->id && (!p->resv_ok || p->resv_time >= now)) {
		if (p->resv_epoch == p->epoch)
			return;
		if (p->resv_ok && now - p->resv_at < RESV_REFRESH && resv_feasible(s, p, now))
			return;
	}
	p->resv_at = now;
	p->resv_job = j->id;
	p->resv_epoch = p->epoch;
	p->resv_ok = 0;
	int n = p->nrunning;
	if (n == 0)
		return;
	struct ending *e = tf_xmalloc((size_t)n * sizeof(*e));
	for (int i = 0; i < n; i++) {
		const struct job *r = &s->jobs[p->running[i]];
		e[i] = (struct ending){est_end(r, now), r->id};
	}
	qsort(e, (size_t)n, sizeof(*e), by_end);
	struct tf_box box;
	size_t nr = (size_t)p->t.nrows;
	/* base: the boxes of e[0..nbase), every job known to end too early; probe: those and
	 * the jobs up to the k being tried, so each k adds only the boxes past the base */
	uint64_t *mem = tf_xcalloc(2 * nr, sizeof(uint64_t)), *base = mem, *probe = mem + nr;
	add_ended(s, p, e, 0, n, probe);
	avail_after(p, probe);
	if (tf_torus_find(&p->t, p->scratch, j->shape, TF_TORUS_ANY, &box)) {
		/* fitting is monotonic in k (releasing only frees chips): binary search, from the
		 * first k that frees enough chips at all */
		int lo = 1, hi = n, nbase = 0;
		int have = tf_torus_count(&p->t, p->free);
		while (lo < n && have + s->jobs[e[lo - 1].id].chips < j->chips)
			have += s->jobs[e[lo++ - 1].id].chips;
		while (lo < hi) {
			int mid = lo + (hi - lo) / 2;
			memcpy(probe, base, nr * sizeof(uint64_t));
			add_ended(s, p, e, nbase, mid, probe);
			avail_after(p, probe);
			if (tf_torus_find(&p->t, p->scratch, j->shape, TF_TORUS_ANY, &box)) {
				hi = mid;
			} else {
				lo = mid + 1;
				uint64_t *t = base; /* the jobs up to mid end too early as well */
				base = probe;
				probe = t;
				nbase = mid;
			}
		}
		add_ended(s, p, e, nbase, lo, base);
		avail_after(p, base);
		tf_torus_find(&p->t, p->scratch, j->shape, TF_TORUS_BEST, &box);
		p->resv_ok = 1;
		p->resv_time = e[lo - 1].end;
		p->resv_box = box;
	}
	free(mem);
	free(e);
	p->resv_serial++; /* the avoiding-memo depends on the reserved box */
}

/* ---- preemption ---- */

/* What a running job is to a job looking for room (lower value: taken first). */
enum victim_class {
	VC_NONE,     /* not to be touched */
	VC_BORROWED, /* runs on borrowed capacity: reclaimed first, at any priority from other
	                projects, at lower priority from its own */
	VC_OWN,      /* the preemptor's project, lower priority, within the quota */
	VC_OTHER,    /* another project, lower priority, within its quota: the last resort */
};

struct victim_search {
	struct tf_sched *s;
	struct pool *p;
	const struct job *j;
	int need;     /* chips of its project's own in-quota jobs that must go for j to fit */
	long best[4]; /* cost of the best box: see box_cost */
	struct tf_box best_box;
	int found;
};

static enum victim_class victim_class(const struct job *j, const struct job *r)
{
	if (r->state != TF_JOB_RUNNING || !r->preemptible)
		return VC_NONE;
	int lower = r->prio < j->prio;
	if (r->borrowed)
		return r->project != j->project || lower ? VC_BORROWED : VC_NONE;
	if (!lower)
		return VC_NONE;
	return r->project == j->project ? VC_OWN : VC_OTHER;
}

/* The cost of a victim set, compared lexicographically: chips of other projects' in-quota
 * jobs, then chips of the project's own in-quota jobs (at least `need`, which must go
 * somewhere to make quota room), then all chips disturbed, then the number of victims. Every
 * component only grows as victims are added, so a partial cost above the best prunes. */
static void box_cost(const struct victim_search *v, const int chips[4], int victims, long c[4])
{
	int own = chips[VC_OWN] > v->need ? chips[VC_OWN] : v->need;
	c[0] = chips[VC_OTHER];
	c[1] = own;
	c[2] = (long)chips[VC_OTHER] + own + chips[VC_BORROWED];
	c[3] = victims;
}

static int cost_less(const long a[4], const long b[4])
{
	for (int i = 0; i < 4; i++)
		if (a[i] != b[i])
			return a[i] < b[i];
	return 0;
}

/* Scores taking box b: the whole of every job it touches is disturbed (gang jobs stop as
 * one). */
static void score_box(struct victim_search *v, const struct tf_box *b)
{
	struct tf_sched *s = v->s;
	struct pool *p = v->p;
	const int *D = p->t.dims;
	int chips[4] = {0}, victims = 0;
	long c[4];
	s->stamp_now++;
	for (int dz = 0; dz < b->shape[2]; dz++)
		for (int dy = 0; dy < b->shape[1]; dy++) {
			int r = (b->origin[1] + dy) % D[1] + D[1] * ((b->origin[2] + dz) % D[2]);
			for (int dx = 0; dx < b->shape[0]; dx++) {
				int o = p->owner[D[0] * r + (b->origin[0] + dx) % D[0]];
				if (!o || s->stamp[o] == s->stamp_now)
					continue;
				s->stamp[o] = s->stamp_now;
				chips[victim_class(v->j, &s->jobs[o])] += s->jobs[o].chips;
				victims++;
				if (v->found) {
					box_cost(v, chips, victims, c);
					if (cost_less(v->best, c))
						return;
				}
			}
		}
	box_cost(v, chips, victims, c);
	if (!v->found || cost_less(c, v->best)) {
		v->found = 1;
		memcpy(v->best, c, sizeof(c));
		v->best_box = *b;
	}
}

/* Every feasible box of the job's shape in avail (all rotations), scored. */
static void each_box(struct victim_search *v, const uint64_t *avail)
{
	static const int perms[6][3] = {{0, 1, 2}, {1, 0, 2}, {0, 2, 1},
	                                {2, 0, 1}, {1, 2, 0}, {2, 1, 0}};
	struct tf_torus *t = &v->p->t;
	int tried[6][3], nt = 0;
	for (int pi = 0; pi < 6; pi++) {
		int sh[3] = {v->j->shape[perms[pi][0]], v->j->shape[perms[pi][1]],
		             v->j->shape[perms[pi][2]]};
		int dup = 0;
		for (int i = 0; i < nt; i++)
			dup |= !memcmp(tried[i], sh, sizeof(sh));
		if (dup || sh[0] > t->dims[0] || sh[1] > t->dims[1] || sh[2] > t->dims[2])
			continue;
		memcpy(tried[nt++], sh, sizeof(sh));
		int oz = t->wrap[2] && sh[2] < t->dims[2] ? t->dims[2] : t->dims[2] - sh[2] + 1;
		int oy = t->wrap[1] && sh[1] < t->dims[1] ? t->dims[1] : t->dims[1] - sh[1] + 1;
		if (t->wrap[2] && sh[2] == t->dims[2])
			oz = 1;
		if (t->wrap[1] && sh[1] == t->dims[1])
			oy = 1;
		const int X = t->dims[0], Y = t->dims[1], Z = t->dims[2];
		for (int z = 0; z < oz; z++)
			for (int y = 0; y < oy; y++) {
				/* the chips usable in every row the box covers, then the origins
				 * where a run of sh[0] of them starts (shifted ANDs, rotated where
				 * x wraps); only those boxes are scored */
				uint64_t acc = t->xmask, m;
				for (int dz = 0; dz < sh[2] && acc; dz++)
					for (int dy = 0; dy < sh[1] && acc; dy++)
						acc &= avail[(y + dy) % Y + Y * ((z + dz) % Z)];
				if (!acc)
					continue;
				if (sh[0] == X) {
					m = acc == t->xmask;
				} else {
					m = acc;
					for (int k = 1; k < sh[0] && m; k++)
						m &= t->wrap[0] ? ((acc >> k) | (acc << (X - k))) &
						                      t->xmask
						                : acc >> k;
				}
				while (m) {
					int x = __builtin_ctzll(m);
					m &= m - 1;
					struct tf_box b = {{x, y, z}, {sh[0], sh[1], sh[2]}};
					score_box(v, &b);
				}
			}
	}
}

static void preempt_one(struct tf_sched *s, struct job *r, const struct job *cause, double now,
                        struct tf_sched_decisions *out)
{
	int moved = set_state(r, TF_JOB_DRAINING);
	TF_ASSERT(moved == 0); /* only running jobs are chosen as victims */
	(void)moved;
	r->deadline = now + s->cfg.grace_seconds;
	r->preemptions++;
	push(s, out,
	     (struct tf_sched_decision){.action = TF_SCHED_PREEMPT,
	                                .job = r->id,
	                                .attempt = r->attempts,
	                                .pool = r->pool,
	                                .box = r->box,
	                                .chips = r->chips,
	                                .deadline = r->deadline,
	                                .cause = cause->id});
}

/* Chips of the project's own lower-priority preemptible in-quota jobs, in every pool: what
 * preempting could give back to its quota. */
static int own_reclaimable(const struct tf_sched *s, const struct job *j)
{
	int n = 0;
	for (int pi = 0; pi < s->npools; pi++) {
		const struct pool *p = &s->pools[pi];
		for (int i = 0; i < p->nrunning; i++) {
			const struct job *r = &s->jobs[p->running[i]];
			if (r->project == j->project && victim_class(j, r) == VC_OWN)
				n += r->chips;
		}
	}
	return n;
}

/* Preempts more of the project's own lower-priority in-quota jobs (anywhere) until `need`
 * chips of quota come back: each time the smallest job that covers what is left, else the
 * largest, so the fewest chips go. */
static void preempt_for_quota(struct tf_sched *s, const struct job *j, int need, double now,
                              struct tf_sched_decisions *out)
{
	while (need > 0) {
		struct job *cover = NULL, *largest = NULL;
		for (int pi = 0; pi < s->npools; pi++) {
			const struct pool *p = &s->pools[pi];
			for (int i = 0; i < p->nrunning; i++) {
				struct job *r = &s->jobs[p->running[i]];
				if (r->project != j->project || victim_class(j, r) != VC_OWN)
					continue;
				if (r->chips >= need && (!cover || r->chips < cover->chips))
					cover = r;
				if (!largest || r->chips > largest->chips)
					largest = r;
			}
		}
		struct job *r = cover ? cover : largest;
		if (!r)
			return; /* cannot happen: own_reclaimable checked there is enough */
		preempt_one(s, r, j, now, out);
		need -= r->chips;
	}
}

/* Holds box b of pool p for queued job j while the jobs on it drain (invariants 4 and 5). */
static void set_target(struct tf_sched *s, struct pool *p, struct job *j, const struct tf_box *b)
{
	j->has_target = 1;
	qent_of(s, j)->flags |= QE_TARGET;
	j->target = *b;
	s->projects[j->project].quota_used += j->chips;
	tf_torus_box_set(&p->t, p->reserved, &j->target, 1);
	refresh_box(p, &j->target);
	if (p->ntargets == p->captargets) {
		p->captargets = p->captargets ? p->captargets * 2 : 8;
		p->targets = tf_xrealloc(p->targets, (size_t)p->captargets * sizeof(int));
	}
	p->targets[p->ntargets++] = j->id;
	p->epoch++;
}

/* Tries to make room for j by preempting: a box of free chips and victims (victim_class)
 * with the lowest box_cost, plus, when its project is short of `need` quota chips, enough of
 * the project's own lower-priority jobs. On success emits PREEMPT decisions, gives j a drain
 * target and holds its chips in the quota. Returns 1 when it did. */
static int try_preempt(struct tf_sched *s, struct pool *p, struct job *j, int need, double now,
                       struct tf_sched_decisions *out)
{
	struct victim_search v = {.s = s, .p = p, .j = j, .need = need > 0 ? need : 0};
	if (v.need && own_reclaimable(s, j) < v.need)
		return 0;
	int any = 0;
	/* usable if we may take it: free, or held by an eligible victim */
	memcpy(p->scratch, p->free, (size_t)p->t.nrows * sizeof(uint64_t));
	for (int i = 0; i < p->nrunning; i++) {
		const struct job *r = &s->jobs[p->running[i]];
		if (victim_class(j, r) != VC_NONE) {
			tf_torus_box_set(&p->t, p->scratch, &r->box, 1);
			any = 1;
		}
	}
	if (!any)
		return 0;
	for (int r = 0; r < p->t.nrows; r++)
		p->scratch[r] &= ~(p->failed[r] | p->reserved[r]);
	if (tf_torus_count(&p->t, p->scratch) < j->chips)
		return 0;
	each_box(&v, p->scratch);
	if (!v.found)
		return 0;
	/* preempt every job the box touches */
	const int *D = p->t.dims;
	const struct tf_box *b = &v.best_box;
	int own = 0;
	for (int dz = 0; dz < b->shape[2]; dz++)
		for (int dy = 0; dy < b->shape[1]; dy++)
			for (int dx = 0; dx < b->shape[0]; dx++) {
				int c = (b->origin[0] + dx) % D[0] +
				        D[0] * ((b->origin[1] + dy) % D[1] +
				                D[1] * ((b->origin[2] + dz) % D[2]));
				struct job *r = &s->jobs[p->owner[c]];
				if (!p->owner[c] || r->state != TF_JOB_RUNNING)
					continue;
				own += victim_class(j, r) == VC_OWN ? r->chips : 0;
				preempt_one(s, r, j, now, out);
			}
	preempt_for_quota(s, j, v.need - own, now, out);
	set_target(s, p, j, &v.best_box);
	p->epoch++;
	return 1;
}

/* ---- the tick ---- */

enum { GO_ON, STOP };

struct scan {
	int head_blocked; /* a job could neither start nor preempt: FIFO stops, backfill reserves */
	int resv;         /* backfill restrictions apply (p->resv_* valid) */
	int borrowers;    /* over-quota jobs that may borrow were skipped in the first pass */
};

/* Quota chips a job of `chips` would overrun its project's quota by if it started within it
 * now (<= 0: it fits), counting the chips held this tick for the project's jobs ahead of it. */
static int quota_over(const struct tf_sched *s, int project, int chips)
{
	const struct project *pr = &s->projects[project];
	if (!pr->quota)
		return 0;
	return pr->quota_used + s->qhold[project] + chips - pr->quota;
}

/* One queued job. pass 0: within its quota (over <= 0), or over it and unable to borrow
 * (over > 0: it may only make quota room by preempting its own project's lower-priority
 * jobs); pass 1: a borrower over its quota (it starts borrowed, or makes quota room the
 * same way). */
static int try_job(struct tf_sched *s, struct pool *p, struct job *j, int pass, int over,
                   double now, struct scan *st, struct tf_sched_decisions *out)
{
	struct tf_box box;
	if ((over <= 0 || pass == 1) && find_fit(p, j, &box)) {
		/* one that would still run at the reserved time goes only off the reserved box */
		if (!st->resv || now + j->est <= p->resv_time ||
		    find_fit_avoiding(p, j, &p->resv_box, &box))
			start_job(s, j, &box, now, pass == 1, !st->resv, out);
		return GO_ON;
	}
	if (!st->head_blocked && s->cfg.preemption && try_preempt(s, p, j, over, now, out))
		return GO_ON;
	if (pass == 0 && over > 0) {
		/* waits for quota, not chips: not a head; the jobs of its project behind it may
		 * not take the quota it waits for (they may still borrow) */
		s->qhold[j->project] += j->chips;
		return GO_ON;
	}
	if (st->head_blocked)
		return GO_ON;
	reserve(s, p, j, now);
	if (!p->resv_ok)
		return GO_ON; /* cannot run even on an empty pool now (failed chips): not a head */
	st->head_blocked = 1;
	s->qhold[j->project] += j->chips; /* its quota is kept for it like its box */
	if (s->cfg.policy == TF_SCHED_FIFO)
		return STOP;
	st->resv = 1;
	return GO_ON;
}

static void schedule_pool(struct tf_sched *s, struct pool *p, double now,
                          struct tf_sched_decisions *out)
{
	/* 2. jobs whose drained box is now clear (and whose project is back within its quota,
	 * its own preempted jobs having exited) */
	for (int i = 0; i < p->ntargets;) {
		struct job *j = &s->jobs[p->targets[i]];
		struct tf_box tb = j->target;
		const struct project *pr = &s->projects[j->project];
		int clear = !pr->quota || pr->quota_used <= pr->quota;
		for (int dz = 0; dz < tb.shape[2] && clear; dz++)
			for (int dy = 0; dy < tb.shape[1] && clear; dy++) {
				int r = (tb.origin[1] + dy) % p->t.dims[1] +
				        p->t.dims[1] * ((tb.origin[2] + dz) % p->t.dims[2]);
				uint64_t m = 0;
				struct tf_box row = {{tb.origin[0], 0, 0}, {tb.shape[0], 1, 1}};
				tf_torus_box_set(&p->t, &m, &row, 1);
				clear = !((p->busy[r] | p->failed[r]) & m);
			}
		if (clear)
			start_job(s, j, &tb, now, 0, 1, out); /* removes it from targets */
		else
			i++;
	}
	if (p->queued == 0)
		return;
	for (int k = 0; k < s->nprojects * NPRIO; k++)
		if (p->q[k].dead)
			qlist_compact(&p->q[k]);
	struct scan st = {0};
	int examined = 0, walked = 0, spent = 0;
	s->walk_serial++;
	int *cursor = s->cursor, np = s->nprojects;
	for (int prio = TF_SCHED_PRIO_MAX; prio >= 0; prio--) {
		st.borrowers = 0;
		for (int pass = 0; pass < 2 && !(pass == 1 && !st.borrowers); pass++) {
			int left = st.borrowers; /* pass 1: deferred borrowers not reached yet */
			for (int k = 0; k < np; k++) {
				const struct qlist *q = &p->q[k * NPRIO + prio];
				cursor[k] = qent_live(q, q->lo);
			}
			int best = -1, alone = 0;
			for (;;) {
				/* next: the project with the lowest fair-share key, then FIFO (ids
				 * follow seq); a project whose key is below every other's stays
				 * next until its list ends or a job is tried (keys move only then)
				 */
				if (!alone || cursor[best] >= p->q[best * NPRIO + prio].n) {
					best = -1;
					int best_id = 0;
					for (int k = 0; k < np; k++) {
						const struct qlist *q = &p->q[k * NPRIO + prio];
						if (cursor[k] >= q->n)
							continue;
						int id = q->v[cursor[k]].id;
						if (best < 0 ||
						    s->projects[k].key < s->projects[best].key ||
						    (s->projects[k].key == s->projects[best].key &&
						     id < best_id)) {
							best = k;
							best_id = id;
						}
					}
					alone = best >= 0;
					for (int k = 0; k < np && alone; k++)
						alone = k == best ||
						        cursor[k] >= p->q[k * NPRIO + prio].n ||
						        s->projects[k].key > s->projects[best].key;
				}
				if (best < 0 || (pass == 1 && left == 0))
					break; /* pass 1 goes no further than pass 0 went */
				/* every job the first pass passes counts, skipped ones too: a queue
				 * of 100,000 borrowers, skipped without counting, made each tick
				 * walk them all; the borrowers it deferred still get their pass */
				if (pass == 0 && ++walked > s->cfg.backfill_depth) {
					spent = 1;
					break;
				}
				struct qlist *q = &p->q[best * NPRIO + prio];
				struct qent *n = &q->v[cursor[best]];
				cursor[best] = qent_live(q, cursor[best] + 1);
				if (n->flags & QE_TARGET)
					continue;
				struct project *pr = &s->projects[best];
				int may_borrow = (n->flags & QE_PREEMPTIBLE) && pr->may_borrow;
				int over = quota_over(s, best, n->chips);
				if (pass == 0 && over > 0 && may_borrow) {
					st.borrowers++;
					n->borrow_walk = s->walk_serial; /* for pass 1 */
					continue;
				}
				if (pass == 1 && n->borrow_walk != s->walk_serial)
					continue;
				if (pass == 1)
					left--;
				if (++examined > s->cfg.backfill_depth)
					return;
				if (p->busy_chips + p->failed_chips >= p->t.nchips &&
				    st.head_blocked)
					return; /* nothing free, and preemption already tried */
				if (st.head_blocked && (pass == 1 || over <= 0) &&
				    memo_no_fit(p, n->sid))
					continue; /* try_job would find no fit and, behind the head,
					             neither preempt nor reserve */
				struct job *j = &s->jobs[n->id];
				alone = 0;
				if (try_job(s, p, j, pass, over, now, &st, out) == STOP)
					return;
			}
		}
		if (spent)
			return; /* lower priorities wait for the next tick */
	}
}

int tf_sched_tick(struct tf_sched *s, double now, struct tf_sched_decisions *out)
{
	if (out)
		out->n = 0;
	accrue(s, now);
	/* 1. victims whose grace ran out */
	for (int pi = 0; pi < s->npools; pi++) {
		struct pool *p = &s->pools[pi];
		for (int i = p->nrunning - 1; i >= 0; i--) {
			if (i >= p->nrunning)
				continue;
			struct job *j = &s->jobs[p->running[i]];
			if (j->state != TF_JOB_DRAINING || j->deadline > now)
				continue;
			push(s, out,
			     (struct tf_sched_decision){.action = TF_SCHED_KILL,
			                                .job = j->id,
			                                .attempt = j->attempts,
			                                .pool = j->pool,
			                                .box = j->box,
			                                .chips = j->chips});
			release_chips(s, j, now);
			requeue(s, j);
		}
	}
	for (int i = 0; i < s->nprojects; i++) {
		project_key(s, &s->projects[i]);
		s->qhold[i] = 0;
	}
	for (int pi = 0; pi < s->npools; pi++)
		schedule_pool(s, &s->pools[pi], now, out);
	return 0;
}

/* ---- events from the caller ---- */

static struct job *job_get(const struct tf_sched *s, int id)
{
	return id >= 1 && id < s->njobs ? &s->jobs[id] : NULL;
}

int tf_sched_finish(struct tf_sched *s, int id, double now, int ok)
{
	struct job *j = job_get(s, id);
	if (!j)
		return -ENOENT;
	enum tf_sched_job_state to = ok ? TF_JOB_DONE : TF_JOB_FAILED;
	if (!may_move(j, to))
		return -EINVAL;
	accrue(s, now);
	release_chips(s, j, now);
	return set_state(j, to);
}

int tf_sched_requeue(struct tf_sched *s, int id, double now)
{
	struct job *j = job_get(s, id);
	if (!j)
		return -ENOENT;
	if (j->state != TF_JOB_DRAINING)
		return -EINVAL;
	accrue(s, now);
	release_chips(s, j, now);
	requeue(s, j);
	return 0;
}

int tf_sched_cancel(struct tf_sched *s, int id, double now)
{
	struct job *j = job_get(s, id);
	if (!j)
		return -ENOENT;
	if (!may_move(j, TF_JOB_CANCELLED))
		return -EINVAL;
	switch (j->state) {
	case TF_JOB_QUEUED:
		drop_target(s, j);
		queue_remove(s, j);
		break;
	case TF_JOB_RUNNING:
	case TF_JOB_DRAINING:
		accrue(s, now);
		release_chips(s, j, now);
		break;
	default:
		break; /* nothing held: the table refused the other states above */
	}
	return set_state(j, TF_JOB_CANCELLED);
}

static int chip_fail(struct tf_sched *s, int pool, int chip, double now,
                     struct tf_sched_decisions *out);

int tf_sched_chip_fail(struct tf_sched *s, int pool, int chip, double now,
                       struct tf_sched_decisions *out)
{
	if (out)
		out->n = 0;
	return chip_fail(s, pool, chip, now, out);
}

int tf_sched_host_fail(struct tf_sched *s, int pool, int host, double now,
                       struct tf_sched_decisions *out)
{
	if (out)
		out->n = 0;
	if (pool < 0 || pool >= s->npools)
		return -ENOENT;
	int n = 0;
	for (int c = 0; c < s->pools[pool].t.nchips; c++)
		if (tf_sched_chip_host(s, pool, c) == host) {
			chip_fail(s, pool, c, now, out);
			n++;
		}
	return n ? 0 : -EINVAL;
}

/* Marks one chip failed, appending to out. */
static int chip_fail(struct tf_sched *s, int pool, int chip, double now,
                     struct tf_sched_decisions *out)
{
	if (pool < 0 || pool >= s->npools)
		return -ENOENT;
	struct pool *p = &s->pools[pool];
	if (chip < 0 || chip >= p->t.nchips)
		return -EINVAL;
	const int *D = p->t.dims;
	struct tf_box one = {{chip % D[0], (chip / D[0]) % D[1], chip / (D[0] * D[1])}, {1, 1, 1}};
	if (tf_torus_box_all(&p->t, p->failed, &one))
		return 0;
	accrue(s, now);
	int o = p->owner[chip];
	if (o) {
		struct job *j = &s->jobs[o];
		j->infra_failures++;
		push(s, out,
		     (struct tf_sched_decision){.action = TF_SCHED_FAIL_INFRA,
		                                .job = j->id,
		                                .attempt = j->attempts,
		                                .pool = pool,
		                                .box = j->box,
		                                .chips = j->chips,
		                                .cause = chip});
		release_chips(s, j, now);
		requeue(s, j);
	}
	/* a drain target over the chip can no longer be used */
	for (int i = 0; i < p->ntargets; i++) {
		struct job *t = &s->jobs[p->targets[i]];
		if (tf_torus_box_contains(&p->t, &t->target, chip)) {
			drop_target(s, t);
			break;
		}
	}
	tf_torus_box_set(&p->t, p->failed, &one, 1);
	refresh_box(p, &one);
	p->failed_chips++;
	p->epoch++;
	return 0;
}

int tf_sched_chip_repair(struct tf_sched *s, int pool, int chip)
{
	if (pool < 0 || pool >= s->npools)
		return -ENOENT;
	struct pool *p = &s->pools[pool];
	if (chip < 0 || chip >= p->t.nchips)
		return -EINVAL;
	const int *D = p->t.dims;
	struct tf_box one = {{chip % D[0], (chip / D[0]) % D[1], chip / (D[0] * D[1])}, {1, 1, 1}};
	if (!tf_torus_box_all(&p->t, p->failed, &one))
		return 0;
	tf_torus_box_set(&p->t, p->failed, &one, 0);
	refresh_box(p, &one);
	p->grow++;
	p->failed_chips--;
	p->epoch++;
	return 0;
}

/* ---- queries ---- */

int tf_sched_job_info(const struct tf_sched *s, int id, double now, struct tf_sched_job_info *out)
{
	const struct job *j = job_get(s, id);
	if (!j)
		return -ENOENT;
	double sec = tf_sched_job_running_seconds(j, now);
	*out = (struct tf_sched_job_info){.state = j->state,
	                                  .name = j->name,
	                                  .run = j->run,
	                                  .project = s->projects[j->project].name,
	                                  .pool = j->pool,
	                                  .chips = j->chips,
	                                  .priority = j->prio,
	                                  .preemptible = j->preemptible,
	                                  .borrowed = j->borrowed,
	                                  .box = j->box,
	                                  .has_target = j->has_target,
	                                  .target = j->target,
	                                  .attempts = j->attempts,
	                                  .preemptions = j->preemptions,
	                                  .infra_failures = j->infra_failures,
	                                  .submitted = j->submitted,
	                                  .first_start = j->first_start,
	                                  .started = j->started,
	                                  .chip_seconds = j->chip_seconds + sec * j->chips,
	                                  .slice_seconds = j->slice_seconds + sec};
	memcpy(out->shape, j->shape, sizeof(out->shape));
	return 0;
}

int tf_sched_job_chips(const struct tf_sched *s, int id, int *chips, size_t cap)
{
	const struct job *j = job_get(s, id);
	if (!j)
		return -ENOENT;
	if (j->state != TF_JOB_RUNNING && j->state != TF_JOB_DRAINING)
		return 0;
	return (int)tf_torus_box_chips(&s->pools[j->pool].t, &j->box, chips, cap);
}

/* Adds to U what the running jobs of run IDX (BY_RUN) or else project IDX have used until NOW:
 * the accounts hold only finished time. */
static void add_running(const struct tf_sched *s, int by_run, int idx, double now,
                        struct tf_sched_usage *u)
{
	for (int i = 0; i < s->npools; i++) {
		const struct pool *p = &s->pools[i];
		for (int k = 0; k < p->nrunning; k++) {
			const struct job *j = &s->jobs[p->running[k]];
			if ((by_run ? j->run_idx : j->project) != idx)
				continue;
			double sec = tf_sched_job_running_seconds(j, now);
			u->chip_seconds += sec * j->chips;
			u->slice_seconds += sec;
		}
	}
}

int tf_sched_project_usage(const struct tf_sched *s, const char *project, double now,
                           struct tf_sched_usage *out)
{
	int pi = project_find(s, project);
	if (pi < 0)
		return -ENOENT;
	const struct project *pr = &s->projects[pi];
	struct tf_sched_usage u = {pr->chip_seconds, pr->slice_seconds, pr->running_chips,
	                           pr->jobs};
	add_running(s, 0, pi, now, &u);
	*out = u;
	return 0;
}

int tf_sched_run_usage(const struct tf_sched *s, const char *run, double now,
                       struct tf_sched_usage *out)
{
	int ri = run_find(s, run);
	if (ri < 0)
		return -ENOENT;
	const struct run_acct *ra = &s->runs[ri];
	struct tf_sched_usage u = {ra->chip_seconds, ra->slice_seconds, ra->running_chips,
	                           ra->jobs};
	add_running(s, 1, ri, now, &u);
	*out = u;
	return 0;
}

double tf_sched_utilization(const struct tf_sched *s, int pool)
{
	long busy = 0, healthy = 0;
	for (int i = 0; i < s->npools; i++) {
		if (pool >= 0 && i != pool)
			continue;
		busy += s->pools[i].busy_chips;
		healthy += s->pools[i].t.nchips - s->pools[i].failed_chips;
	}
	return healthy ? (double)busy / (double)healthy : 0;
}

int tf_sched_pool_largest(struct tf_sched *s, int pool, struct tf_box *out)
{
	struct pool *p = &s->pools[pool];
	if (p->largest_gen != p->gen) {
		p->largest_gen = p->gen;
		p->largest_ok = tf_torus_largest(&p->t, p->free, &p->largest);
	}
	*out = p->largest;
	return p->largest_ok;
}

double tf_sched_fragmentation(struct tf_sched *s, int pool)
{
	struct pool *p = &s->pools[pool];
	int freec = tf_torus_count(&p->t, p->free);
	struct tf_box b;
	if (freec == 0 || !tf_sched_pool_largest(s, pool, &b))
		return 0;
	return 1.0 - (double)(b.shape[0] * b.shape[1] * b.shape[2]) / freec;
}

int tf_sched_job_reason(struct tf_sched *s, int id, char *buf, size_t len)
{
	struct job *j = job_get(s, id);
	if (!j)
		return -ENOENT;
	struct pool *p = &s->pools[j->pool];
	char need[32], lf[32];
	tf_sched_shape_str(j->shape, p->t.ndims, need, sizeof(need));
	if (j->state != TF_JOB_QUEUED) {
		snprintf(buf, len, "%s", tf_sched_state_name(j->state));
		return 0;
	}
	if (j->has_target) {
		snprintf(buf, len, "waiting for preempted jobs to checkpoint and release %s", need);
		return 0;
	}
	const struct project *pr = &s->projects[j->project];
	if (pr->quota && pr->quota_used + j->chips > pr->quota &&
	    !(j->preemptible && pr->may_borrow)) {
		snprintf(buf, len, "project '%s' at quota: uses %d of %d chips, needs %d more%s",
		         pr->name, pr->quota_used, pr->quota, j->chips,
		         j->preemptible ? "" : " (only preemptible jobs may borrow)");
		return 0;
	}
	struct tf_box lb;
	int freec = tf_torus_count(&p->t, p->free);
	if (!tf_sched_pool_largest(s, j->pool, &lb))
		snprintf(lf, sizeof(lf), "none");
	else
		tf_sched_shape_str(lb.shape, p->t.ndims, lf, sizeof(lf));
	struct tf_box fit;
	int fits = tf_torus_find(&p->t, p->free, j->shape, TF_TORUS_ANY, &fit);
	if (!fits) {
		int n = snprintf(buf, len, "needs %s, largest free %s (%d chips free)", need, lf,
		                 freec);
		if (p->resv_job == j->id && p->resv_ok && n > 0 && (size_t)n < len)
			snprintf(buf + n, len - (size_t)n, "; reserved from t=%.0f", p->resv_time);
		return 0;
	}
	if (p->resv_job && p->resv_job != j->id && p->resv_ok) {
		if (s->cfg.policy == TF_SCHED_FIFO)
			snprintf(buf, len, "behind blocked job %d (fifo policy)", p->resv_job);
		else
			snprintf(buf, len, "would delay the reservation of job %d at t=%.0f",
			         p->resv_job, p->resv_time);
		return 0;
	}
	snprintf(buf, len, "fits now: starts at the next tick");
	return 0;
}
