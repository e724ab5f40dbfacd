/* npy.h — NumPy .npy files (format versions 1-3, C order) for `tpuflow predict` and
 * `tpuflow accel matmul`. */
#ifndef TF_ML_NPY_H
#define TF_ML_NPY_H

#include <stddef.h>

enum tf_npy_dtype { TF_NPY_U8, TF_NPY_F32, TF_NPY_F64, TF_NPY_LAST };

struct tf_npy {
	enum tf_npy_dtype dtype; /* element type */
	int ndim;                /* dimensions (1..4) */
	size_t shape[4];         /* sizes */
	size_t count;            /* elements */
	void *data;              /* count elements (owned) */
};

/* Reads path; -EBADMSG with err naming the problem for unsupported or damaged files. */
int tf_npy_read(const char *path, struct tf_npy *out, char *err, size_t errlen);
void tf_npy_release(struct tf_npy *a);
/* Writes a 2-D float32 array rows x cols. 0 or negative errno. */
int tf_npy_write_f32(const char *path, const float *data, size_t rows, size_t cols);

#endif
