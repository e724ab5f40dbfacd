/* serve_input.c — owns the reading of prediction request bodies into model inputs checked
 * against the version's signature (docs/serving.md): TensorFlow Serving's row ("instances")
 * and columnar ("inputs") formats, the common row body parsed without a JSON tree, and the
 * Open Inference Protocol's input tensor; errors name the offending field and index. Every
 * example goes through tf_bundle_preprocess, the input path of `tpuflow predict`.
 */
#include "web/serve_int.h"

#include "common/common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs ----------------------------------------------------------------------------- */

struct input_ctx {
	const struct tf_bundle *b;
	int image;     /* values must be integers 0..255 */
	int nonfinite; /* NaN, Infinity and -Infinity are values too (TensorFlow Serving's) */
	char *err;
	size_t errlen;
};

/* TensorFlow Serving's tokens for the float values JSON has no number for: the length of the
 * one p starts with (*d its value), or 0. */
static size_t nonfinite_token(const char *p, const char *end, double *d)
{
	static const struct {
		const char *text;
		size_t len;
		double value;
	} tokens[] = {{"NaN", 3, NAN}, {"Infinity", 8, INFINITY}, {"-Infinity", 9, -INFINITY}};
	if (p == end || (*p != 'N' && *p != 'I' && *p != '-')) /* a number, most often */
		return 0;
	for (size_t i = 0; i < TF_ARRAY_LEN(tokens); i++)
		if ((size_t)(end - p) >= tokens[i].len && !memcmp(p, tokens[i].text, tokens[i].len)) {
			*d = tokens[i].value;
			return tokens[i].len;
		}
	return 0;
}

char *tf_serve_quote_nonfinite(const char *p, size_t len, size_t *outlen)
{
	struct tf_buf o = {0};
	const char *end = p + len, *copied = p;
	int in_string = 0;
	for (const char *q = p; q < end; q++) {
		if (in_string) {
			if (*q == '\\')
				q++;
			else if (*q == '"')
				in_string = 0;
			continue;
		}
		double d;
		size_t n = *q == '"' ? 0 : nonfinite_token(q, end, &d);
		in_string = *q == '"';
		/* a token, not the start of a longer word ("NaNa" stays the parser's error) */
		if (!n || (q + n < end && (isalnum((unsigned char)q[n]) || q[n] == '_')))
			continue;
		tf_buf_append(&o, copied, (size_t)(q - copied));
		tf_buf_append(&o, "\"", 1);
		tf_buf_append(&o, q, n);
		tf_buf_append(&o, "\"", 1);
		q += n - 1;
		copied = q + 1;
	}
	if (!o.len)
		return NULL;
	tf_buf_append(&o, copied, (size_t)(end - copied));
	*outlen = o.len;
	return tf_buf_detach(&o);
}

/* Flattens the numbers of j (nested arrays, row-major) into out[cap], counting in *n;
 * field names the place in errors. -EINVAL on a wrong type, -E2BIG past cap. */
static int flatten(const struct input_ctx *c, const json_t *j, float *out, size_t cap, size_t *n,
                   const char *field)
{
	if (json_is_array(j)) {
		size_t i;
		const json_t *x;
		json_array_foreach(j, i, x)
		{
			int rc = flatten(c, x, out, cap, n, field);
			if (rc)
				return rc;
		}
		return 0;
	}
	const char *text = json_string_value(j);
	double special;
	if (text && c->nonfinite &&
	    nonfinite_token(text, text + json_string_length(j), &special) == json_string_length(j)) {
		/* TensorFlow Serving's NaN, Infinity, -Infinity (bare in the body, which
		 * tf_serve_quote_nonfinite quoted, or quoted as proto3's JSON writes them) */
		if (c->image) {
			tf_errf(c->err, c->errlen,
			        "%s, value %zu: %s is not a uint8 (the model takes pixels 0..255)",
			        field, *n, text);
			return -EINVAL;
		}
		if (*n >= cap)
			return -E2BIG;
		out[(*n)++] = (float)special;
		return 0;
	}
	if (!json_is_number(j)) {
		tf_errf(c->err, c->errlen, "%s, value %zu: expected a number (%s input), got %s",
		        field, *n, c->image ? "uint8" : "float32",
		        json_is_string(j)   ? "a string"
		        : json_is_object(j) ? "an object"
		        : json_is_null(j)   ? "null"
		                            : "a boolean");
		return -EINVAL;
	}
	double d = json_number_value(j);
	if (c->image && (d != floor(d) || d < 0 || d > 255)) {
		tf_errf(c->err, c->errlen,
		        "%s, value %zu: %.17g is not a uint8 (the model takes pixels 0..255)",
		        field, *n, d);
		return -EINVAL;
	}
	if (!isfinite(d) || fabs(d) > 3.4028234663852886e38) {
		tf_errf(c->err, c->errlen, "%s, value %zu: %.17g is not a finite float32", field,
		        *n, d);
		return -EINVAL;
	}
	if (*n >= cap)
		return -E2BIG;
	out[(*n)++] = (float)d;
	return 0;
}

/* One example from j into x[dim] (preprocessed); field names it in errors. */
static int one_example(const struct input_ctx *c, const json_t *j, float *x, const char *field)
{
	size_t dim = c->b->mlp.size[0], n = 0;
	float raw[TF_MLP_MAX_WIDTH];
	int rc = flatten(c, j, raw, dim, &n, field);
	if (rc == -E2BIG || (!rc && n != dim)) {
		if (c->b->rows)
			tf_errf(c->err, c->errlen,
			        "%s: expected %zu values (or %d x %d), got %s%zu", field, dim,
			        c->b->rows, c->b->cols, rc ? "more than " : "", n);
		else
			tf_errf(c->err, c->errlen, "%s: expected %zu values, got %s%zu", field, dim,
			        rc ? "more than " : "", n);
		return -EINVAL;
	}
	if (rc)
		return rc;
	tf_bundle_preprocess(c->b, raw, x);
	return 0;
}

const char *tf_serve_input_name(const struct tf_bundle *b)
{
	const char *s =
	    json_string_value(json_object_get(json_object_get(b->signature, "input"), "name"));
	return s ? s : "input";
}

const char *tf_serve_v2_datatype(const struct tf_bundle *b)
{
	return b->pre.image ? "UINT8" : "FP32";
}

/* Allocates x for n examples after the batch cap check. */
static float *batch_alloc(struct tf_serve *sv, const struct tf_bundle *b, size_t n,
                          const char *field, char *err, size_t errlen)
{
	if (n == 0) {
		tf_errf(err, errlen, "%s: no instances", field);
		return NULL;
	}
	if (n > sv->max_batch) {
		tf_errf(err, errlen, "%s: %zu instances, over this server's batch cap of %zu",
		        field, n, sv->max_batch);
		return NULL;
	}
	return tf_xmalloc(n * b->mlp.size[0] * sizeof(float));
}

/* The examples of a TF Serving body: "instances" (row) or "inputs" (columnar); *x (n x
 * inputs, preprocessed) is new. *columnar says which. A float input takes the strings "NaN",
 * "Infinity" and "-Infinity" for those values (tf_serve_quote_nonfinite). -EINVAL with err. */
int tf_serve_tfs_inputs(struct tf_serve *sv, const struct tf_bundle *b, const json_t *body,
                        float **x, size_t *n, int *columnar, char *err, size_t errlen)
{
	struct input_ctx c = {b, b->pre.image, 1, err, errlen};
	const char *iname = tf_serve_input_name(b);
	const json_t *inst = json_object_get(body, "instances"),
	             *cols = json_object_get(body, "inputs");
	const json_t *sig = json_object_get(body, "signature_name");
	if (sig && (!json_is_string(sig) || (strcmp(json_string_value(sig), "serving_default") &&
	                                     *json_string_value(sig)))) {
		tf_errf(err, errlen, "signature_name: the only signature is 'serving_default'");
		return -EINVAL;
	}
	if (!inst == !cols) {
		tf_errf(err, errlen,
		        "give exactly one of 'instances' (row format) or 'inputs' "
		        "(columnar format)");
		return -EINVAL;
	}
	*columnar = cols != NULL;
	const char *field = inst ? "instances" : "inputs";
	const json_t *list = inst ? inst : cols;
	if (json_is_object(list)) { /* {"inputs": {"image": [...]}} */
		const json_t *named = json_object_get(list, iname);
		if (!named || json_object_size(list) != 1) {
			tf_errf(err, errlen, "%s: the model has one input, '%s'", field, iname);
			return -EINVAL;
		}
		list = named;
	}
	if (!json_is_array(list)) {
		tf_errf(err, errlen, "%s: expected a list of examples", field);
		return -EINVAL;
	}
	*n = json_array_size(list);
	float *buf = batch_alloc(sv, b, *n, field, err, errlen);
	if (!buf)
		return -EINVAL;
	size_t dim = b->mlp.size[0];
	for (size_t i = 0; i < *n; i++) {
		const json_t *ex = json_array_get(list, i);
		char where[64];
		snprintf(where, sizeof(where), "%s[%zu]", field, i);
		if (json_is_object(ex)) { /* row format with named inputs */
			const json_t *v = json_object_get(ex, iname);
			if (!v || json_object_size(ex) != 1) {
				tf_errf(err, errlen, "%s: the model has one input, '%s'", where,
				        iname);
				free(buf);
				return -EINVAL;
			}
			ex = v;
		}
		if (one_example(&c, ex, buf + i * dim, where)) {
			free(buf);
			return -EINVAL;
		}
	}
	*x = buf;
	return 0;
}

/* ---- TensorFlow Serving ----------------------------------------------------------------- */

/* The common request, parsed without building a JSON tree: {"instances": [[n, ...], ...]}
 * with flat examples of plain numbers (integers 0..255 for an image model; for a float one,
 * TensorFlow Serving's NaN, Infinity and -Infinity too). Returns 1 with
 * *x (n x inputs, preprocessed) new when the body is exactly that and every value is
 * acceptable, 0 when not (the general path then parses it and names any error). */
int tf_serve_fast_instances(struct tf_serve *sv, const struct tf_bundle *b, const char *p,
                            const char *end, float **x, size_t *n)
{
	static const char head[] = "\"instances\"";
	const size_t dim = b->mlp.size[0];
	float raw[TF_MLP_MAX_WIDTH];
	float *buf = NULL;
	size_t rows = 0, cap = 0;
#define WS()                                                                                       \
	while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))                   \
	p++
#define EXPECT(c)                                                                                  \
	do {                                                                                       \
		WS();                                                                              \
		if (p == end || *p != (c))                                                         \
			goto no;                                                                   \
		p++;                                                                               \
	} while (0)
	EXPECT('{');
	WS();
	if ((size_t)(end - p) < sizeof(head) - 1 || memcmp(p, head, sizeof(head) - 1))
		goto no;
	p += sizeof(head) - 1;
	EXPECT(':');
	EXPECT('[');
	do {
		EXPECT('[');
		size_t k = 0;
		do {
			WS();
			if (b->pre.image && k < dim) { /* the common pixel: 1 to 3 digits, <= 255 */
				const char *q = p;
				unsigned iv = 0;
				while (q < end && q - p < 4 && *q >= '0' && *q <= '9')
					iv = iv * 10 + (unsigned)(*q++ - '0');
				if (q > p && q - p < 4 && iv <= 255 && (*p != '0' || q - p == 1) &&
				    q < end && (*q == ',' || *q == ']')) {
					raw[k++] = (float)iv;
					p = q;
					continue; /* the while below: a comma goes on */
				}
			}
			double d;
			size_t tl;
			if (!b->pre.image && k < dim && (tl = nonfinite_token(p, end, &d))) {
				raw[k++] = (float)d; /* TensorFlow Serving's NaN, Infinity */
				p += tl;
				WS();
				continue;
			}
			/* a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
			const char *q = p;
			int neg = q < end && *q == '-', real = 0;
			q += neg;
			if (q == end || *q < '0' || *q > '9' ||
			    (*q == '0' && q + 1 < end && q[1] >= '0' && q[1] <= '9'))
				goto no;
			uint64_t iv = 0;
			int digits = 0;
			for (; q < end && *q >= '0' && *q <= '9'; q++, digits++)
				iv = iv * 10 + (uint64_t)(*q - '0');
			if (q < end && *q == '.') {
				real = 1;
				if (++q == end || *q < '0' || *q > '9')
					goto no;
				while (q < end && *q >= '0' && *q <= '9')
					q++;
			}
			if (q < end && (*q == 'e' || *q == 'E')) {
				real = 1;
				q++;
				if (q < end && (*q == '+' || *q == '-'))
					q++;
				if (q == end || *q < '0' || *q > '9')
					goto no;
				while (q < end && *q >= '0' && *q <= '9')
					q++;
			}
			if (k == dim || digits > 15)
				goto no;
			if (!real) {
				d = neg ? -(double)iv : (double)iv; /* exact: below 2^53 */
			} else if (b->pre.image) {
				goto no;
			} else {
				char num[64];
				if ((size_t)(q - p) >= sizeof(num))
					goto no;
				memcpy(num, p, (size_t)(q - p));
				num[q - p] = 0;
				d = strtod(num, NULL);
			}
			if (b->pre.image ? (neg || d > 255)
			                 : (!isfinite(d) || fabs(d) > 3.4028234663852886e38))
				goto no;
			raw[k++] = (float)d;
			p = q;
			WS();
		} while (p < end && *p == ',' && ++p);
		EXPECT(']');
		if (k != dim || rows == sv->max_batch)
			goto no;
		if (rows == cap) {
			cap = cap ? 2 * cap : 4;
			if (cap > sv->max_batch)
				cap = sv->max_batch;
			float *grown = realloc(buf, cap * dim * sizeof(float));
			if (!grown)
				goto no; /* buf is freed there */
			buf = grown;
		}
		tf_bundle_preprocess(b, raw, buf + rows * dim);
		rows++;
		WS();
	} while (p < end && *p == ',' && ++p);
	EXPECT(']');
	EXPECT('}');
	WS();
	if (p != end)
		goto no;
#undef EXPECT
#undef WS
	*x = buf;
	*n = rows;
	return 1;
no:
	free(buf);
	return 0;
}
/* ---- Open Inference Protocol ------------------------------------------------------------ */

/* The "parameters" of o, when there, are a JSON object; field names them in the error. */
static int v2_params_ok(const json_t *o, const char *field, char *err, size_t errlen)
{
	const json_t *p = json_object_get(o, "parameters");
	if (!p || json_is_object(p))
		return 1;
	tf_errf(err, errlen, "%s: expected an object of parameters", field);
	return 0;
}

/* The parts of an inference request besides its input tensor, as the protocol types them:
 * "id" a string, "parameters" objects, and "outputs" naming outputs the model has (it has
 * one, "probabilities"; an empty or absent list means all of them). */
static int v2_request_ok(const json_t *body, char *err, size_t errlen)
{
	const json_t *id = json_object_get(body, "id"), *outs = json_object_get(body, "outputs");
	if (id && !json_is_string(id)) {
		tf_errf(err, errlen, "id: expected a string");
		return 0;
	}
	if (!v2_params_ok(body, "parameters", err, errlen))
		return 0;
	if (outs && !json_is_array(outs)) {
		tf_errf(err, errlen, "outputs: expected a list of {\"name\": ...}");
		return 0;
	}
	size_t i;
	const json_t *o;
	json_array_foreach(outs, i, o)
	{
		const char *name = json_string_value(json_object_get(o, "name"));
		if (!name || strcmp(name, "probabilities")) {
			tf_errf(err, errlen, "outputs[%zu].name: the model's only output is "
			        "'probabilities'%s%s%s", i, name ? ", not '" : "", name ? name : "",
			        name ? "'" : "");
			return 0;
		}
		char field[48];
		snprintf(field, sizeof(field), "outputs[%zu].parameters", i);
		if (!v2_params_ok(o, field, err, errlen))
			return 0;
	}
	return 1;
}

/* The one input tensor of an inference request into *x (n x inputs, preprocessed). */
int tf_serve_v2_inputs(struct tf_serve *sv, const struct tf_bundle *b, const json_t *body,
                       float **x, size_t *n, char *err, size_t errlen)
{
	if (!v2_request_ok(body, err, errlen))
		return -EINVAL;
	const json_t *ins = json_object_get(body, "inputs");
	if (!json_is_array(ins) || json_array_size(ins) != 1) {
		tf_errf(err, errlen, "inputs: expected a list of one tensor, '%s'",
		        tf_serve_input_name(b));
		return -EINVAL;
	}
	const json_t *t = json_array_get(ins, 0), *shape = json_object_get(t, "shape");
	const char *name = json_string_value(json_object_get(t, "name"));
	const char *dt = json_string_value(json_object_get(t, "datatype"));
	if (!name || strcmp(name, tf_serve_input_name(b))) {
		tf_errf(err, errlen, "inputs[0].name: the model's input is '%s'",
		        tf_serve_input_name(b));
		return -EINVAL;
	}
	if (!v2_params_ok(t, "inputs[0].parameters", err, errlen))
		return -EINVAL;
	if (!dt || strcmp(dt, tf_serve_v2_datatype(b))) {
		tf_errf(err, errlen, "inputs[0].datatype: the model takes %s, not %s",
		        tf_serve_v2_datatype(b), dt ? dt : "(none)");
		return -EINVAL;
	}
	size_t dim = b->mlp.size[0], rank = json_array_size(shape);
	int ok = json_is_array(shape) && rank >= 2 && rank <= 3;
	size_t dims[3] = {0};
	for (size_t i = 0; ok && i < rank; i++) {
		json_int_t d = json_integer_value(json_array_get(shape, i));
		ok = json_is_integer(json_array_get(shape, i)) && d >= 0;
		dims[i] = (size_t)d;
	}
	if (ok)
		ok = rank == 2
		         ? dims[1] == dim
		         : b->rows && dims[1] == (size_t)b->rows && dims[2] == (size_t)b->cols;
	if (!ok) {
		if (b->rows)
			tf_errf(err, errlen, "inputs[0].shape: expected [N, %zu] or [N, %d, %d]",
			        dim, b->rows, b->cols);
		else
			tf_errf(err, errlen, "inputs[0].shape: expected [N, %zu]", dim);
		return -EINVAL;
	}
	*n = dims[0];
	float *buf = batch_alloc(sv, b, *n, "inputs[0].shape[0]", err, errlen);
	if (!buf)
		return -EINVAL;
	float *raw = tf_xmalloc(*n * dim * sizeof(float));
	size_t got = 0;
	struct input_ctx c = {b, b->pre.image, 0, err, errlen};
	int rc = flatten(&c, json_object_get(t, "data"), raw, *n * dim, &got, "inputs[0].data");
	if (rc == -E2BIG || (!rc && got != *n * dim)) {
		tf_errf(err, errlen, "inputs[0].data: the shape says %zu values, got %s%zu",
		        *n * dim, rc ? "more than " : "", got);
		rc = -EINVAL;
	}
	for (size_t i = 0; !rc && i < *n; i++)
		tf_bundle_preprocess(b, raw + i * dim, buf + i * dim);
	free(raw);
	if (rc) {
		free(buf);
		return rc;
	}
	*x = buf;
	return 0;
}
