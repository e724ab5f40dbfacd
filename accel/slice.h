/* slice.h — a data-parallel program on an emulated TPU slice.
 *
 * One replica per TensorCore, each on its shard of the global batch. Replicas run on a host
 * thread pool (threads <= host cores; more replicas than threads is normal: each thread takes
 * replica indices until none are left). Replicas must not share mutable state; the results
 * then do not depend on which thread ran which replica.
 *
 * Gradients are combined with tf_slice_allreduce: a sum in a fixed order, a ring per torus
 * dimension (the chip's own TensorCores first, then x, y, z), so every replica gets the same
 * bits whatever the host thread count. Device time is accounted as the slowest replica's
 * cycles / clock per tf_slice_run (each GEMM: max of its MXU cycles and its HBM traffic over
 * the core's HBM bandwidth), plus alpha-beta time for each collective:
 *     T = 2 (p - 1) alpha + 2 (p - 1) / p * bytes / B       per ring of p members
 * with B the ICI link bandwidth per direction, doubled along a dimension with wrap-around
 * links (the ring runs both ways); HBM bandwidth and no alpha between the cores of one chip.
 *
 * Typical step:
 *     tf_slice_run(rt, forward_backward, &ctx);   // each replica: tf_slice_gemm(...)
 *     tf_slice_allreduce(rt, grads, n);           // grads[r] is replica r's buffer
 * or, with the gradients made inside the all-reduce a cache-sized block at a time:
 *     tf_slice_run(rt, forward_backward, &ctx);   // ... tf_slice_gemm_count(...)
 *     tf_slice_allreduce_gen(rt, n, gen, &ctx, sum);
 */
#ifndef TF_SLICE_H
#define TF_SLICE_H

#include <stddef.h>
#include <stdint.h>

#include "accel/mxu.h"
#include "accel/tpu.h"

struct tf_slice_rt; /* opaque */

/* What a replica knows about itself; passed to the function tf_slice_run calls. */
struct tf_slice_replica {
	int index;     /* 0 .. replicas-1: chip-major (chip index * cores_per_chip + core) */
	int replicas;  /* total, = slice cores */
	int chip;      /* chip index, x fastest */
	int core;      /* TensorCore within the chip */
	int coords[3]; /* the chip's torus coordinates */
	struct tf_slice_rt *rt; /* the runtime (for tf_slice_gemm) */
	uint64_t cycles;        /* MXU cycles this replica used in the current tf_slice_run */
	uint64_t macs;          /* multiply-adds issued in the current tf_slice_run */
	uint64_t hbm_bytes;     /* HBM traffic of its GEMMs in the current tf_slice_run */
	uint64_t hbm_extra;     /* cycles its GEMMs waited for HBM beyond their compute */
};

typedef void (*tf_slice_fn)(struct tf_slice_replica *replica, void *arg);

struct tf_slice_stats {
	uint64_t runs;             /* tf_slice_run calls */
	uint64_t allreduces;       /* tf_slice_allreduce calls */
	uint64_t cycles;           /* sum over runs of the slowest replica's MXU cycles */
	uint64_t macs;             /* multiply-adds over all replicas */
	double compute_seconds;    /* cycles / clock */
	double collective_seconds; /* alpha-beta time of the all-reduces */
	double device_seconds;     /* compute + collective */
	double bytes_reduced;      /* payload bytes per replica over all all-reduces */
	double mxu_utilization;    /* macs / (cycles * R * C * MXUs per core * replicas) */
	double hbm_bytes;          /* HBM traffic of the GEMMs, all replicas */
	uint64_t hbm_bound_cycles; /* of `cycles`, those the slowest replicas waited for HBM */
};

/* Creates a runtime for `slice` (copied). host_threads 0 means all host cores; it is capped at
 * the host's cores and at the replica count. ftz as in tf_mxu_cfg (1 = TPU mode). Returns 0
 * or -EINVAL (a bad argument); the caller owns *out and frees it with tf_slice_rt_free. */
int tf_slice_rt_new(const struct tf_tpu_slice *slice, int host_threads, int ftz,
                    struct tf_slice_rt **out);
void tf_slice_rt_free(struct tf_slice_rt *rt);

const struct tf_tpu_slice *tf_slice_rt_slice(const struct tf_slice_rt *rt);
int tf_slice_rt_replicas(const struct tf_slice_rt *rt);
int tf_slice_rt_threads(const struct tf_slice_rt *rt);

/* Calls fn(replica, arg) once for every replica on the pool and waits for all of them; then
 * adds the slowest replica's cycles to the device time. */
void tf_slice_run(struct tf_slice_rt *rt, tf_slice_fn fn, void *arg);

/* The MXU GEMM of mxu.h on this replica's TensorCore: the generation's array size and MXU
 * count, the runtime's ftz; counts its roofline cycles (tf_slice_gemm_cycles) against the
 * replica. Uses several host threads only when there are more host threads than replicas. */
void tf_slice_gemm(struct tf_slice_replica *r, int trans_x, int trans_w, size_t M, size_t K,
                   size_t N, const float *X, size_t ldx, const float *W, size_t ldw, float *C,
                   size_t ldc);

/* Counts an M x K . K x N GEMM against the replica as tf_slice_gemm does (device cycles, HBM
 * traffic, multiply-adds) without computing it: for a replica program whose product is made
 * later by tf_slice_allreduce_gen's generator. */
void tf_slice_gemm_count(struct tf_slice_replica *r, size_t M, size_t K, size_t N);

/* tf_slice_gemm with op(W) from a pack (tf_mxu_wpack_set with tf_slice_mxu_cfg's
 * configuration): the replicas of a step share one packing of their common weights. */
void tf_slice_gemm_wpack(struct tf_slice_replica *r, int trans_x, size_t M, const float *X,
                         size_t ldx, const struct tf_mxu_wpack *w, float *C, size_t ldc);

/* The MXU configuration replicas' GEMMs run with (array size, MXUs, ftz, host threads). */
void tf_slice_mxu_cfg(const struct tf_slice_rt *rt, struct tf_mxu_cfg *cfg);

/* The device cycles of an M x K . K x N GEMM on one TensorCore of generation g that needs
 * `compute` MXU cycles: max(compute, HBM traffic / the core's share of HBM bandwidth), a
 * roofline. Traffic: X and W read once as bf16, C written as fp32, (MK + KN) * 2 + MN * 4
 * bytes. *bytes (may be NULL) receives the traffic. */
uint64_t tf_slice_gemm_cycles(const struct tf_tpu_gen *g, size_t M, size_t K, size_t N,
                              uint64_t compute, uint64_t *bytes);

/* Sum-all-reduce of n floats: bufs[i] is replica i's buffer (replicas entries); on return every
 * buffer holds the same sum, computed in the fixed ring order. Adds its alpha-beta time. */
void tf_slice_allreduce(struct tf_slice_rt *rt, float *const *bufs, size_t n);

/* tf_slice_allreduce with the sum written to bufs[0] only (the other buffers are left as they
 * were): for a loop that applies one update to weights all replicas share, as the emulation
 * keeps one copy of them. Same bits in bufs[0], same device time, no copies to the others. */
void tf_slice_allreduce_first(struct tf_slice_rt *rt, float *const *bufs, size_t n);

/* Writes replica's values of elements [lo, hi) of the n floats being all-reduced to
 * out[0 .. hi - lo). Called on the runtime's threads, concurrently for disjoint ranges. */
typedef void (*tf_slice_gen_fn)(int replica, size_t lo, size_t hi, float *out, void *arg);

/* tf_slice_allreduce_first of buffers that are never stored whole: gen makes each replica's
 * values block by block (e.g. its weight gradient, from what its pass kept), and each block of
 * every replica is summed, in the ring order, while it is in cache, straight into sum[0..n).
 * The same bits in sum as tf_slice_allreduce_first leaves in bufs[0] when bufs[r] holds what
 * gen writes for replica r; the same device time. Blocks run on the host thread pool. */
void tf_slice_allreduce_gen(struct tf_slice_rt *rt, size_t n, tf_slice_gen_fn gen, void *arg,
                            float *sum);

/* The alpha-beta time of one all-reduce of `bytes` per replica on this slice. */
double tf_slice_allreduce_seconds(const struct tf_tpu_slice *slice, double bytes);

/* Checks that bytes_per_replica fit in one TensorCore's share of its chip's HBM. 0, or
 * -ENOMEM with a message in err. */
int tf_slice_check_hbm(const struct tf_tpu_slice *slice, double bytes_per_replica, char *err,
                       size_t errlen);

/* The shard of a global batch of `total` items replica `index` of `replicas` takes: counts
 * differ by at most one, earlier replicas take the extra items. */
void tf_slice_shard(size_t total, int replicas, int index, size_t *start, size_t *count);

void tf_slice_stats(const struct tf_slice_rt *rt, struct tf_slice_stats *out);
void tf_slice_stats_reset(struct tf_slice_rt *rt);

#endif
