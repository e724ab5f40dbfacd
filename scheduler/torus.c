/* torus.c — occupancy bitmaps of a pool's chips and the word-parallel sub-mesh search
 * (feasible origins by shifted ANDs, rotations, wrap-around, contact scoring). */
#include "scheduler/torus.h"
#include "common/common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tf_torus_init(struct tf_torus *t, int ndims, const int dims[3], const int wrap[3])
{
	memset(t, 0, sizeof(*t));
	if (ndims < 1 || ndims > 3)
		return -EINVAL;
	long n = 1;
	for (int d = 0; d < 3; d++) {
		int v = d < ndims ? dims[d] : 1;
		if (v < 1 || v > 4096)
			return -EINVAL;
		t->dims[d] = v;
		/* A ring of one or two chips has no wrap link distinct from its line. */
		t->wrap[d] = d < ndims && wrap && wrap[d] && v > 2;
		n *= v;
	}
	if (t->dims[0] > TF_TORUS_MAX_X || n > 65536)
		return -EINVAL;
	t->ndims = ndims < 2 ? 2 : ndims;
	t->nchips = (int)n;
	t->nrows = t->dims[1] * t->dims[2];
	t->xmask = t->dims[0] == 64 ? ~(uint64_t)0 : (((uint64_t)1 << t->dims[0]) - 1);
	t->f = tf_xcalloc((size_t)t->nrows, sizeof(uint64_t));
	t->g = tf_xcalloc((size_t)t->nrows, sizeof(uint64_t));
	t->h = tf_xcalloc((size_t)t->nrows, sizeof(uint64_t));
	return 0;
}

void tf_torus_release(struct tf_torus *t)
{
	if (!t)
		return;
	free(t->f);
	free(t->g);
	free(t->h);
	t->f = t->g = t->h = NULL;
}

/* Bit x of the result is bit (x + k) of v: along a ring it wraps, along a line it runs out. */
static inline uint64_t xshift(const struct tf_torus *t, uint64_t v, int k)
{
	if (k == 0)
		return v;
	if (t->wrap[0])
		return ((v >> k) | (v << (t->dims[0] - k))) & t->xmask;
	return v >> k;
}

/* The x bits of a box in one row: sx bits starting at x0 (wrapping along a ring). */
static inline uint64_t xrange(const struct tf_torus *t, int x0, int sx)
{
	uint64_t m = sx >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << sx) - 1);
	if (x0 == 0)
		return m & t->xmask;
	uint64_t r = m << x0;
	if (x0 + sx > t->dims[0])
		r |= m >> (t->dims[0] - x0);
	return r & t->xmask;
}

static inline int row_of(const struct tf_torus *t, int y, int z)
{
	return y + t->dims[1] * z;
}

void tf_torus_box_set(const struct tf_torus *t, uint64_t *bm, const struct tf_box *b, int value)
{
	uint64_t m = xrange(t, b->origin[0], b->shape[0]);
	for (int dz = 0; dz < b->shape[2]; dz++)
		for (int dy = 0; dy < b->shape[1]; dy++) {
			int r = row_of(t, (b->origin[1] + dy) % t->dims[1],
			               (b->origin[2] + dz) % t->dims[2]);
			if (value)
				bm[r] |= m;
			else
				bm[r] &= ~m;
		}
}

int tf_torus_box_all(const struct tf_torus *t, const uint64_t *bm, const struct tf_box *b)
{
	uint64_t m = xrange(t, b->origin[0], b->shape[0]);
	for (int dz = 0; dz < b->shape[2]; dz++)
		for (int dy = 0; dy < b->shape[1]; dy++) {
			int r = row_of(t, (b->origin[1] + dy) % t->dims[1],
			               (b->origin[2] + dz) % t->dims[2]);
			if ((bm[r] & m) != m)
				return 0;
		}
	return 1;
}

size_t tf_torus_box_chips(const struct tf_torus *t, const struct tf_box *b, int *chips, size_t cap)
{
	size_t n = 0;
	for (int dz = 0; dz < b->shape[2]; dz++)
		for (int dy = 0; dy < b->shape[1]; dy++)
			for (int dx = 0; dx < b->shape[0]; dx++) {
				int x = (b->origin[0] + dx) % t->dims[0];
				int y = (b->origin[1] + dy) % t->dims[1];
				int z = (b->origin[2] + dz) % t->dims[2];
				if (n < cap)
					chips[n] = x + t->dims[0] * row_of(t, y, z);
				n++;
			}
	return n;
}

int tf_torus_box_contains(const struct tf_torus *t, const struct tf_box *b, int c)
{
	int p[3] = {c % t->dims[0], (c / t->dims[0]) % t->dims[1], c / (t->dims[0] * t->dims[1])};
	for (int d = 0; d < 3; d++) {
		int off = ((p[d] - b->origin[d]) % t->dims[d] + t->dims[d]) % t->dims[d];
		if (off >= b->shape[d])
			return 0;
	}
	return 1;
}

int tf_torus_count(const struct tf_torus *t, const uint64_t *bm)
{
	int n = 0;
	for (int r = 0; r < t->nrows; r++)
		n += __builtin_popcountll(bm[r] & t->xmask);
	return n;
}

/* How many origins a dimension offers for extent s: every position along a ring (one when the
 * box spans the whole ring, since all positions give the same chips), else D - s + 1. */
static inline int origins(const struct tf_torus *t, int d, int s)
{
	if (t->wrap[d])
		return s < t->dims[d] ? t->dims[d] : 1;
	return t->dims[d] - s + 1;
}

/* Unusable neighbours of the box: chips outside it adjacent to a face that are not set in
 * avail, with a mesh edge counting as unusable (a box against the edge fragments nothing). */
static int contact(const struct tf_torus *t, const uint64_t *avail, int x0, int y0, int z0,
                   const int s[3])
{
	const int X = t->dims[0], Y = t->dims[1], Z = t->dims[2];
	int score = 0;
	/* x faces */
	if (t->wrap[0] && s[0] == X) {
		score += 2 * s[1] * s[2];
	} else {
		int xl = x0 - 1, xr = x0 + s[0];
		int ledge = xl < 0 && !t->wrap[0], redge = xr >= X && !t->wrap[0];
		xl = (xl + X) % X;
		xr %= X;
		for (int dz = 0; dz < s[2]; dz++)
			for (int dy = 0; dy < s[1]; dy++) {
				uint64_t w = avail[row_of(t, (y0 + dy) % Y, (z0 + dz) % Z)];
				score += ledge || !((w >> xl) & 1);
				score += redge || !((w >> xr) & 1);
			}
	}
	uint64_t m = xrange(t, x0, s[0]);
	/* y faces */
	if (t->wrap[1] && s[1] == Y) {
		score += 2 * s[0] * s[2];
	} else {
		int yl = y0 - 1, yr = y0 + s[1];
		int ledge = yl < 0 && !t->wrap[1], redge = yr >= Y && !t->wrap[1];
		yl = (yl + Y) % Y;
		yr %= Y;
		for (int dz = 0; dz < s[2]; dz++) {
			int z = (z0 + dz) % Z;
			score += ledge ? s[0] : __builtin_popcountll(~avail[row_of(t, yl, z)] & m);
			score += redge ? s[0] : __builtin_popcountll(~avail[row_of(t, yr, z)] & m);
		}
	}
	/* z faces */
	if (t->wrap[2] && s[2] == Z) {
		score += 2 * s[0] * s[1];
	} else {
		int zl = z0 - 1, zr = z0 + s[2];
		int ledge = zl < 0 && !t->wrap[2], redge = zr >= Z && !t->wrap[2];
		zl = (zl + Z) % Z;
		zr %= Z;
		for (int dy = 0; dy < s[1]; dy++) {
			int y = (y0 + dy) % Y;
			score += ledge ? s[0] : __builtin_popcountll(~avail[row_of(t, y, zl)] & m);
			score += redge ? s[0] : __builtin_popcountll(~avail[row_of(t, y, zr)] & m);
		}
	}
	return score;
}

/* Most candidates scored per rotation in BEST mode: beyond this many feasible origins the
 * pool is mostly empty and contact hardly differs, so the first-found order (z, y, x
 * ascending, which packs toward the origin) decides. */
#define MAX_SCORED 128

/* One orientation s (extents along x, y, z). Returns the best score found (-1: none) and
 * writes the box when it beats *best. */
static int search_oriented(struct tf_torus *t, const uint64_t *avail, const int s[3],
                           enum tf_torus_mode mode, int best, struct tf_box *out)
{
	const int X = t->dims[0], Y = t->dims[1], Z = t->dims[2];
	if (s[0] > X || s[1] > Y || s[2] > Z)
		return best;
	const int ox = origins(t, 0, s[0]), oy = origins(t, 1, s[1]), oz = origins(t, 2, s[2]);
	const uint64_t xo = ox >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << ox) - 1);

	/* f: per row, origins x with s[0] usable chips from x on. Runs double in length each
	 * step (run(2w) = run(w) & run(w) shifted by w), and a last overlapping step reaches
	 * s[0], so this takes log2(s[0]) word operations per row. */
	uint64_t any = 0;
	for (int r = 0; r < t->nrows; r++) {
		uint64_t acc = avail[r] & t->xmask;
		int have = 1;
		while (acc && have * 2 <= s[0]) {
			acc &= xshift(t, acc, have);
			have *= 2;
		}
		if (acc && have < s[0])
			acc &= xshift(t, acc, s[0] - have);
		t->f[r] = acc & xo;
		any |= t->f[r];
	}
	if (!any)
		return best;
	/* g: ... and for s[1] rows in y from y on (the ring index stepped, not divided). */
	any = 0;
	for (int z = 0; z < Z; z++) {
		const uint64_t *fz = t->f + (size_t)Y * z;
		uint64_t *gz = t->g + (size_t)Y * z;
		for (int y = 0; y < Y; y++) {
			uint64_t acc = 0;
			if (y < oy) {
				acc = fz[y];
				for (int k = 1, yk = y; k < s[1] && acc; k++) {
					if (++yk == Y)
						yk = 0;
					acc &= fz[yk];
				}
			}
			gz[y] = acc;
			any |= acc;
		}
	}
	if (!any)
		return best;
	/* h: ... and for s[2] planes in z from z on: the feasible origins. */
	int scored = 0;
	const int maxscore = 2 * (s[1] * s[2] + s[0] * s[2] + s[0] * s[1]);
	for (int z = 0; z < oz; z++)
		for (int y = 0; y < oy; y++) {
			uint64_t acc = t->g[row_of(t, y, z)];
			for (int k = 1, zk = z; k < s[2] && acc; k++) {
				if (++zk == Z)
					zk = 0;
				acc &= t->g[row_of(t, y, zk)];
			}
			while (acc) {
				int x = __builtin_ctzll(acc);
				acc &= acc - 1;
				int sc = mode == TF_TORUS_BEST ? contact(t, avail, x, y, z, s) : 0;
				if (sc > best) {
					best = sc;
					*out = (struct tf_box){{x, y, z}, {s[0], s[1], s[2]}};
				}
				if (mode != TF_TORUS_BEST || best >= maxscore ||
				    ++scored >= MAX_SCORED)
					return best;
			}
		}
	return best;
}

int tf_torus_find(struct tf_torus *t, const uint64_t *avail, const int want[3],
                  enum tf_torus_mode mode, struct tf_box *out)
{
	static const int perms[6][3] = {{0, 1, 2}, {1, 0, 2}, {0, 2, 1},
	                                {2, 0, 1}, {1, 2, 0}, {2, 1, 0}};
	int tried[6][3], ntried = 0, best = -1;
	struct tf_box box;
	for (int p = 0; p < 6; p++) {
		int s[3] = {want[perms[p][0]], want[perms[p][1]], want[perms[p][2]]};
		int dup = 0;
		for (int i = 0; i < ntried; i++)
			dup |= !memcmp(tried[i], s, sizeof(s));
		if (dup)
			continue;
		memcpy(tried[ntried++], s, sizeof(s));
		int before = best;
		best = search_oriented(t, avail, s, mode, best, &box);
		if (best > before && mode != TF_TORUS_BEST)
			break;
	}
	if (best < 0)
		return 0;
	*out = box;
	return 1;
}

struct shape_vol {
	int s[3];
	int vol;
};

static int by_volume_desc(const void *a, const void *b)
{
	const struct shape_vol *x = a, *y = b;
	if (x->vol != y->vol)
		return y->vol - x->vol;
	/* Among equal volumes prefer the most cube-like (smallest longest side). */
	int mx = x->s[0] > x->s[1] ? x->s[0] : x->s[1];
	mx = mx > x->s[2] ? mx : x->s[2];
	int my = y->s[0] > y->s[1] ? y->s[0] : y->s[1];
	my = my > y->s[2] ? my : y->s[2];
	return mx - my;
}

/* One step of largest_volume along y (d = 1) or z (d = 2), extent e - 1 to e: row r of dst
 * (y + Y * z) keeps the origins it had (all of src's at e = 1) whose row e - 1 further along d
 * is set in src & mask too, where extent e allows an origin along d. Returns whether any bit
 * is left. */
static inline uint64_t grow_extent(const struct tf_torus *t, int d, int e, const uint64_t *src,
                                   uint64_t mask, uint64_t *dst)
{
	const int Y = t->dims[1], Z = t->dims[2], o = origins(t, d, e);
	uint64_t any = 0;
	for (int z = 0; z < Z; z++)
		for (int y = 0; y < Y; y++) {
			uint64_t v = 0;
			if ((d == 1 ? y : z) < o) {
				v = src[d == 1 ? row_of(t, (y + e - 1) % Y, z)
				               : row_of(t, y, (z + e - 1) % Z)] &
				    mask;
				if (e > 1)
					v &= dst[row_of(t, y, z)];
			}
			dst[row_of(t, y, z)] = v;
			any |= v;
		}
	return any;
}

/* The largest volume of a box of any oriented extents (a, b, c) whose chips are all set in
 * avail, with the feasibility rules of search_oriented: per x extent a the runs (f), per y
 * extent b their AND over b rows (g), per z extent c that over c planes (h), each grown from
 * the extent before by one more AND per row (grow_extent). An extent that fits nowhere ends
 * its loop (a longer one cannot fit either), and (a, b) pairs that cannot beat the best
 * volume even at the full z extent are skipped. */
static int largest_volume(struct tf_torus *t, const uint64_t *avail)
{
	const int X = t->dims[0], Y = t->dims[1], Z = t->dims[2];
	uint64_t *run = t->f, *g = t->g, *h = t->h;
	int best = 0;
	for (int r = 0; r < t->nrows; r++)
		run[r] = avail[r] & t->xmask;
	for (int a = 1; a <= X; a++) {
		const int ox = origins(t, 0, a);
		const uint64_t xo = ox >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << ox) - 1);
		uint64_t anyf = 0;
		if (a > 1)
			for (int r = 0; r < t->nrows; r++)
				run[r] &= xshift(t, avail[r] & t->xmask, a - 1);
		for (int r = 0; r < t->nrows; r++)
			anyf |= run[r] & xo;
		if (!anyf)
			break;
		for (int b = 1; b <= Y; b++) {
			if (!grow_extent(t, 1, b, run, xo, g))
				break;
			if (a * b * Z <= best)
				continue;
			for (int c = 1; c <= Z; c++) {
				if (!grow_extent(t, 2, c, g, ~(uint64_t)0, h))
					break;
				if (a * b * c > best)
					best = a * b * c;
			}
		}
	}
	return best;
}

int tf_torus_largest(struct tf_torus *t, const uint64_t *avail, struct tf_box *out)
{
	int free_chips = tf_torus_count(t, avail);
	if (free_chips == 0)
		return 0;
	/* the first feasible shape in the order below has the largest feasible volume: known
	 * first, it lets the search skip every larger shape */
	int vmax = largest_volume(t, avail);
	size_t n = (size_t)t->dims[0] * t->dims[1] * t->dims[2], k = 0;
	struct shape_vol *v = tf_xmalloc(n * sizeof(*v));
	for (int a = 1; a <= t->dims[0]; a++)
		for (int b = 1; b <= t->dims[1]; b++)
			for (int c = 1; c <= t->dims[2]; c++)
				if (a * b * c <= free_chips)
					v[k++] = (struct shape_vol){{a, b, c}, a * b * c};
	qsort(v, k, sizeof(*v), by_volume_desc);
	int found = 0;
	for (size_t i = 0; i < k && !found; i++)
		found = v[i].vol <= vmax &&
		        search_oriented(t, avail, v[i].s, TF_TORUS_ANY, -1, out) >= 0;
	free(v);
	return found;
}
