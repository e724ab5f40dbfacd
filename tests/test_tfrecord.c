/* test_tfrecord.c — TFRecord framing and CRCs, corrupt-record errors, tf.train.Example
 * encoding round trips, and a cross-check against `protoc` with the public schema. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/crc32c.h"
#include "ml/example.h"
#include "ml/tfrecord.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_tfrecord_framing_and_index(void **state)
{
	(void)state;
	struct tf_buf b = {0};
	const char *recs[] = {"hello", "", "tpuflow record three"};
	for (int i = 0; i < 3; i++)
		tf_tfrecord_append(&b, recs[i], strlen(recs[i]));
	/* first record: 8-byte LE length 5, masked CRC of those 8 bytes */
	assert_int_equal(b.data[0], 5);
	for (int i = 1; i < 8; i++)
		assert_int_equal(b.data[i], 0);
	uint32_t lcrc = tf_crc32c_mask(tf_crc32c(b.data, 8));
	assert_memory_equal(b.data + 8, &lcrc, 4); /* little-endian host */
	uint32_t dcrc = tf_crc32c_mask(tf_crc32c("hello", 5));
	assert_memory_equal(b.data + 17, &dcrc, 4);
	assert_int_equal(b.len, 3 * 16 + 5 + 0 + strlen(recs[2]));

	struct tf_tfrecord_span *s = NULL;
	size_t n = 0;
	char err[256];
	assert_int_equal(tf_tfrecord_index("a.tfrecord", b.data, b.len, &s, &n, err, sizeof err),
	                 0);
	assert_int_equal(n, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(s[i].len, strlen(recs[i]));
		assert_memory_equal(b.data + s[i].off, recs[i], s[i].len);
	}
	free(s);
	tf_buf_release(&b);
}

static void test_tfrecord_corrupt_record_names_file_and_index(void **state)
{
	(void)state;
	struct tf_buf b = {0};
	for (int i = 0; i < 4; i++)
		tf_tfrecord_append(&b, "0123456789", 10);
	struct tf_tfrecord_span *s = NULL;
	size_t n = 0;
	char err[256];
	b.data[2 * 26 + 12 + 3] ^= 0x40; /* a payload byte of record 2 */
	assert_int_equal(
	    tf_tfrecord_index("train-00001.tfrecord", b.data, b.len, &s, &n, err, sizeof err),
	    -EBADMSG);
	assert_non_null(strstr(err, "train-00001.tfrecord"));
	assert_non_null(strstr(err, "record 2"));
	b.data[2 * 26 + 12 + 3] ^= 0x40;
	b.data[26 + 1] ^= 1; /* record 1's length */
	assert_int_equal(tf_tfrecord_index("x", b.data, b.len, &s, &n, err, sizeof err), -EBADMSG);
	assert_non_null(strstr(err, "record 1"));
	b.data[26 + 1] ^= 1;
	assert_int_equal(tf_tfrecord_index("x", b.data, b.len - 3, &s, &n, err, sizeof err),
	                 -EBADMSG);
	assert_non_null(strstr(err, "record 3"));
	tf_buf_release(&b);
}

static void test_tfrecord_example_roundtrip(void **state)
{
	(void)state;
	unsigned char img[784];
	for (int i = 0; i < 784; i++)
		img[i] = (unsigned char)(i * 7);
	int64_t label = 9;
	float feats[3] = {1.5f, -2.25f, 1e-30f};
	struct tf_feature_in f[] = {
	    {.name = "image", .kind = TF_FEATURE_BYTES, .data = img, .count = 1, .bytes = 784},
	    {.name = "label", .kind = TF_FEATURE_INT64, .data = &label, .count = 1},
	    {.name = "x", .kind = TF_FEATURE_FLOAT, .data = feats, .count = 3},
	};
	struct tf_buf b = {0};
	tf_example_encode(f, 3, &b);
	struct tf_feature_view v[8];
	assert_int_equal(tf_example_decode(b.data, b.len, v, 8), 3);
	const unsigned char *p;
	size_t len;
	assert_int_equal(tf_feature_bytes(tf_example_find(v, 3, "image"), &p, &len), 0);
	assert_int_equal(len, 784);
	assert_memory_equal(p, img, 784);
	int64_t l = 0;
	assert_int_equal(tf_feature_int64s(tf_example_find(v, 3, "label"), &l, 1), 1);
	assert_int_equal(l, 9);
	float got[3];
	assert_int_equal(tf_feature_floats(tf_example_find(v, 3, "x"), got, 3), 3);
	assert_memory_equal(got, feats, sizeof feats);
	assert_null(tf_example_find(v, 3, "nope"));
	/* a truncated message is refused, not read past its end */
	assert_int_equal(tf_example_decode(b.data, b.len - 5, v, 8), -EBADMSG);
	tf_buf_release(&b);
}

/* The source tree: $TPUFLOW_BIN is <root>/<build>/tpuflow. */
static int proto_dir(char *out, size_t n)
{
	const char *bin = getenv("TPUFLOW_BIN");
	if (!bin)
		return -1;
	char tmp[PATH_MAX];
	if (strlen(bin) >= sizeof tmp - 16)
		return -1;
	strcpy(tmp, bin);
	for (int i = 0; i < 2; i++) {
		char *s = strrchr(tmp, '/');
		if (!s)
			return -1;
		*s = 0;
	}
	if (strlen(tmp) + 13 > n)
		return -1;
	strcpy(out, tmp);
	strcat(out, "/tests/proto");
	return access(out, R_OK) ? -1 : 0;
}

static char *run_capture(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	if (!f)
		return NULL;
	char *buf = calloc(1, 65536);
	size_t n = fread(buf, 1, 65535, f);
	buf[n] = 0;
	if (pclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static void test_tfrecord_protoc_cross_check(void **state)
{
	(void)state;
	char dir[PATH_MAX], cmd[PATH_MAX + 256];
	if (system("command -v protoc >/dev/null 2>&1") != 0 || proto_dir(dir, sizeof dir)) {
		fprintf(stderr, "skipped: protoc (protobuf-compiler) or tests/proto not found\n");
		skip();
	}
	unsigned char img[4] = {0, 1, 200, 255};
	int64_t label = 7;
	float feats[2] = {0.5f, -3.0f};
	struct tf_feature_in f[] = {
	    {.name = "image", .kind = TF_FEATURE_BYTES, .data = img, .count = 1, .bytes = 4},
	    {.name = "label", .kind = TF_FEATURE_INT64, .data = &label, .count = 1},
	    {.name = "x", .kind = TF_FEATURE_FLOAT, .data = feats, .count = 2},
	};
	struct tf_buf b = {0};
	tf_example_encode(f, 3, &b);
	FILE *o = fopen("ex.bin", "wb");
	assert_non_null(o);
	assert_int_equal(fwrite(b.data, 1, b.len, o), b.len);
	fclose(o);
	snprintf(cmd, sizeof cmd,
	         "protoc -I'%s' --decode tensorflow.Example example.proto "
	         "< ex.bin",
	         dir);
	char *text = run_capture(cmd);
	assert_non_null(text);
	assert_non_null(strstr(text, "key: \"label\""));
	assert_non_null(strstr(text, "value: 7"));
	assert_non_null(strstr(text, "value: \"\\000\\001\\310\\377\""));
	assert_non_null(strstr(text, "value: 0.5"));
	assert_non_null(strstr(text, "value: -3"));
	free(text);

	/* and the other way: protoc's encoding of a one-feature Example equals ours */
	o = fopen("ex.txt", "w");
	fputs("features { feature { key: \"label\" value { int64_list { value: 300 } } } }\n", o);
	fclose(o);
	snprintf(cmd, sizeof cmd,
	         "protoc -I'%s' --encode tensorflow.Example example.proto "
	         "< ex.txt | od -An -tx1 -v",
	         dir);
	text = run_capture(cmd);
	assert_non_null(text);
	label = 300;
	struct tf_buf b2 = {0};
	tf_example_encode(&f[1], 1, &b2);
	char hex[512] = "", *h = hex;
	for (size_t i = 0; i < b2.len; i++)
		h += sprintf(h, "%02x", b2.data[i]);
	char compact[512], *c = compact;
	for (char *t = text; *t; t++)
		if (*t != ' ' && *t != '\n')
			*c++ = *t;
	*c = 0;
	assert_string_equal(compact, hex);
	free(text);
	tf_buf_release(&b);
	tf_buf_release(&b2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tfrecord_framing_and_index),
	    cmocka_unit_test(test_tfrecord_corrupt_record_names_file_and_index),
	    cmocka_unit_test(test_tfrecord_example_roundtrip),
	    cmocka_unit_test(test_tfrecord_protoc_cross_check),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
