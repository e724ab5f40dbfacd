/* rng.h — the one deterministic random generator of the training workload: SplitMix64
 * (Steele, Lea, Flood 2014). Its whole state is one uint64_t, so checkpoints store it as is. */
#ifndef TF_ML_RNG_H
#define TF_ML_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t tf_rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* A seed derived from a base seed and up to two stream numbers (epoch, purpose). */
static inline uint64_t tf_rng_seed(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t s = seed ^ 0x5DEECE66Dull;
	s = tf_rng_next(&s) ^ (a * 0xD1B54A32D192ED03ull);
	s = tf_rng_next(&s) ^ (b * 0xABC98388FB8FAC03ull);
	return tf_rng_next(&s);
}

/* Uniform integer in [0, n) (n > 0), by Lemire's multiply-shift; bias < 2^-32 for n < 2^32. */
static inline uint32_t tf_rng_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(((tf_rng_next(s) >> 32) * (uint64_t)n) >> 32);
}

/* Uniform double in [0, 1). */
static inline double tf_rng_unit(uint64_t *s)
{
	return (double)(tf_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal by Box-Muller (one value per call; deterministic given the state). */
static inline double tf_rng_normal(uint64_t *s)
{
	double u1 = tf_rng_unit(s), u2 = tf_rng_unit(s);
	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
