/* source.h — raw data sources for data prep: Fashion-MNIST IDX files (gzip) and CSV tables
 * (feature columns + an integer label column). Both load into one in-memory raw set. */
#ifndef TF_ML_SOURCE_H
#define TF_ML_SOURCE_H

#include <stddef.h>
#include <stdint.h>

/* Default location of Debian's dataset-fashion-mnist package. */
#define TF_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Fashion-MNIST class names, label order (Xiao, Rasul, Vollgraf 2017). */
extern const char *const tf_fashion_classes[10];

/* A loaded table: n examples of dim features, either uint8 pixels or floats. */
struct tf_rawset {
	size_t n;          /* examples */
	size_t dim;        /* features per example */
	int rows, cols;    /* image shape (0 for tabular) */
	unsigned char *u8; /* n*dim pixels (images), owned, or NULL */
	float *f32;        /* n*dim features (tabular), owned, or NULL */
	int64_t *labels;   /* n labels in [0, num_classes), owned */
	int num_classes;   /* max label + 1 */
};

void tf_rawset_release(struct tf_rawset *r);

/* Loads the train (60,000) or test (10,000) split from dir (NULL: the default). A missing
 * directory or file gives -ENOENT and a message naming the package to install. */
int tf_fashion_load(const char *dir, int train, struct tf_rawset *out, char *err, size_t errlen);

/* Loads a CSV file with a header line; label_col names the label column (NULL: "label");
 * every other column is a float feature. Labels must be integers >= 0. */
int tf_csv_load(const char *path, const char *label_col, struct tf_rawset *out, char *err,
                size_t errlen);

#endif
