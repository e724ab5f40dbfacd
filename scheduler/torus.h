/* torus.h — the chips of one pool laid out as a 1-3 dimensional torus (or mesh), kept as
 * occupancy bitmaps, and the sub-mesh search that placement is built on.
 *
 * Layout: chip (x, y, z) has index x + X*(y + Y*z); the "row" (y, z) is one 64-bit word whose
 * bit x is that chip, so X <= 64. A 2D pool has Z = 1. A dimension wraps around (torus) or not
 * (mesh) as the pool says; a box may cross the wrap-around seam only in a wrapping dimension.
 *
 * The search never walks chips one by one: for a box a x b x c it ANDs shifted (or rotated)
 * row words — "origins x where a free run of length a starts" — then ANDs those words over b
 * rows in y and c rows in z, so the set bits of the result are exactly the feasible origins.
 * That costs O(rows x (a + b + c)) word operations per rotation, whatever the pool's load.
 */
#ifndef TF_SCHED_TORUS_H
#define TF_SCHED_TORUS_H

#include <stddef.h>
#include <stdint.h>

#define TF_TORUS_MAX_X 64 /* one row is one 64-bit word */

/* An axis-aligned box of chips: origin in pool coordinates (0 <= origin[d] < dims[d]) and
 * extent per pool axis (after rotation). It may wrap in a wrapping dimension. */
struct tf_box {
	int origin[3]; /* x, y, z of the first chip */
	int shape[3];  /* extent along x, y, z (1 for unused dimensions) */
};

struct tf_torus {
	int ndims;           /* 2 or 3 (1 is treated as 2 with Y = 1) */
	int dims[3];         /* X, Y, Z; Z = 1 for a 2D pool */
	int wrap[3];         /* 1: the dimension is a ring (torus links), 0: a line (mesh edge) */
	int nrows;           /* Y * Z words per bitmap */
	int nchips;          /* X * Y * Z */
	uint64_t xmask;      /* the low X bits */
	uint64_t *f, *g, *h; /* scratch rows for the search (nrows words each) */
};

/* Sets up a torus of dims (each >= 1, X <= 64, X*Y*Z <= 65536); 0 or -EINVAL. */
int tf_torus_init(struct tf_torus *t, int ndims, const int dims[3], const int wrap[3]);
void tf_torus_release(struct tf_torus *t);

/* Sets (value 1) or clears (0) the bits of a box in a bitmap of t->nrows words. */
void tf_torus_box_set(const struct tf_torus *t, uint64_t *bm, const struct tf_box *b, int value);
/* 1 when every chip of the box has its bit set in bm. */
int tf_torus_box_all(const struct tf_torus *t, const uint64_t *bm, const struct tf_box *b);
/* Chip indices of a box, in z, y, x order; returns the count (writes at most cap). */
size_t tf_torus_box_chips(const struct tf_torus *t, const struct tf_box *b, int *chips, size_t cap);
/* 1 when chip index c lies inside the box. */
int tf_torus_box_contains(const struct tf_torus *t, const struct tf_box *b, int c);

/* Search modes. */
enum tf_torus_mode {
	TF_TORUS_ANY,  /* the first feasible origin (existence checks, reservations) */
	TF_TORUS_BEST, /* the feasible box touching the most unavailable chips and mesh edges,
	                  which keeps the large free regions whole */
	TF_TORUS_MODE_LAST
};

/* Looks for a box of the requested extents, trying every distinct rotation (permutation of
 * the extents) that fits the pool, whose chips are all set in `avail` (bit = usable).
 * Returns 1 and writes *out when found, 0 when no such box exists. */
int tf_torus_find(struct tf_torus *t, const uint64_t *avail, const int want[3],
                  enum tf_torus_mode mode, struct tf_box *out);

/* The largest-volume box (any extents) whose chips are all set in avail; 0 if none is. */
int tf_torus_largest(struct tf_torus *t, const uint64_t *avail, struct tf_box *out);

/* Number of set bits (usable chips) in a bitmap. */
int tf_torus_count(const struct tf_torus *t, const uint64_t *bm);

#endif
