/* sim.h — the scheduler measuring itself: a seeded workload of gang jobs (slice sizes,
 * priorities, projects, durations, optional chip failures) replayed through the scheduler on
 * a simulated clock, reporting decisions per second of scheduler time, utilization, waits per
 * priority, preemptions and fragmentation. */
#ifndef TF_SCHED_SIM_H
#define TF_SCHED_SIM_H

#include "scheduler/sched.h"

#include <stdint.h>

struct tf_sched_sim_opts {
	const char *pool;            /* "v4:16x16x16" */
	int jobs;                    /* jobs in the workload */
	uint64_t seed;               /* workload seed: same seed, same jobs */
	enum tf_sched_policy policy; /* scheduling policy */
	double load;                 /* offered load: work / (chips x arrival span), default 1.2 */
	int failures;                /* chip failures injected over the arrival span */
	/* Reads a monotonic clock in seconds (the scheduler reads none itself); NULL: no timing. */
	double (*clock)(void);
};

struct tf_sched_sim_result {
	enum tf_sched_policy policy;
	int jobs, completed;         /* submitted, finished */
	uint64_t decisions;          /* start + preempt + kill + fail_infra decisions */
	uint64_t ticks;              /* tf_sched_tick calls */
	double sched_seconds;        /* time spent inside scheduler calls */
	double decisions_per_second; /* decisions / sched_seconds */
	double makespan;             /* simulated seconds from first arrival to last finish */
	double utilization;          /* chip-seconds of work done / (healthy chips x makespan) */
	double busy_fraction; /* time-average of busy / healthy chips until the last finish */
	double wait_mean[TF_SCHED_PRIO_MAX + 1]; /* mean wait to first start, per priority */
	double wait_p95[TF_SCHED_PRIO_MAX + 1];  /* 95th percentile of the same */
	int wait_jobs[TF_SCHED_PRIO_MAX + 1];    /* jobs per priority */
	int preemptions, kills, infra_failures;  /* counts */
	double fragmentation; /* mean over samples of 1 - largest free box / free chips */
	/* FNV-1a over every decision in order (its time, action, job, attempt, box, chips,
	 * deadline and cause): two runs made the same decisions iff the digests match, which
	 * is how a change meant to be faster, not different, is checked */
	uint64_t trace_digest;
};

/* Runs the workload; 0, or -EINVAL with a message in err (bad pool). */
int tf_sched_simulate(const struct tf_sched_sim_opts *o, struct tf_sched_sim_result *r, char *err,
                      size_t errlen);

#endif
