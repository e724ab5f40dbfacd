/* test_sigv4.c — SigV4 against AWS's published examples: the Signature Version 4 test suite
 * (get-vanilla, query ordering, post-vanilla-query; credentials AKIDEXAMPLE) and the S3 API
 * reference's header-based examples (GET Object with Range, PUT Object, GET ?lifecycle,
 * list with max-keys/prefix; credentials AKIAIOSFODNN7EXAMPLE). Expected strings are the
 * published ones, not values computed by this code. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/common.h"
#include "storage/sigv4.h"
#include "common/digest.h"

#include <stdlib.h>
#include <string.h>

#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static const struct tf_sigv4_kv suite_headers[] = {
    {"Host", "example.amazonaws.com"},
    {"X-Amz-Date", "20150830T123600Z"},
};

static struct tf_sigv4_req suite_req(const char *method, const struct tf_sigv4_kv *q, size_t nq)
{
	struct tf_sigv4_req r = {
	    .method = method,
	    .path = "/",
	    .query = q,
	    .nquery = nq,
	    .headers = suite_headers,
	    .nheaders = 2,
	    .payload_sha256 = EMPTY_SHA,
	    .amz_date = "20150830T123600Z",
	    .region = "us-east-1",
	    .service = "service",
	    .access_key = "AKIDEXAMPLE",
	    .secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
	};
	return r;
}

static void test_sigv4_get_vanilla(void **state)
{
	(void)state;
	struct tf_sigv4_req r = suite_req("GET", NULL, 0);
	struct tf_sigv4 s;
	tf_sigv4_sign(&r, &s);
	assert_string_equal(s.canonical_request, "GET\n/\n\n"
	                                         "host:example.amazonaws.com\n"
	                                         "x-amz-date:20150830T123600Z\n\n"
	                                         "host;x-amz-date\n" EMPTY_SHA);
	assert_string_equal(s.string_to_sign,
	                    "AWS4-HMAC-SHA256\n20150830T123600Z\n"
	                    "20150830/us-east-1/service/aws4_request\n"
	                    "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
	assert_string_equal(s.signature,
	                    "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
	assert_string_equal(
	    s.authorization,
	    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
	    "aws4_request, SignedHeaders=host;x-amz-date, "
	    "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
	tf_sigv4_release(&s);
}

static void test_sigv4_query_order_key_case(void **state)
{
	(void)state;
	/* the request line is /?Param2=value2&Param1=value1: parameters get sorted */
	struct tf_sigv4_kv q[] = {{"Param2", "value2"}, {"Param1", "value1"}};
	struct tf_sigv4_req r = suite_req("GET", q, 2);
	struct tf_sigv4 s;
	tf_sigv4_sign(&r, &s);
	assert_string_equal(s.canonical_request, "GET\n/\nParam1=value1&Param2=value2\n"
	                                         "host:example.amazonaws.com\n"
	                                         "x-amz-date:20150830T123600Z\n\n"
	                                         "host;x-amz-date\n" EMPTY_SHA);
	assert_non_null(strstr(s.string_to_sign,
	                       "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0"));
	assert_string_equal(s.signature,
	                    "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");
	tf_sigv4_release(&s);
}

static void test_sigv4_query_order_key(void **state)
{
	(void)state;
	/* /?Param1=value2&Param1=Value1: same name, sorted by value (bytewise) */
	struct tf_sigv4_kv q[] = {{"Param1", "value2"}, {"Param1", "Value1"}};
	struct tf_sigv4_req r = suite_req("GET", q, 2);
	struct tf_sigv4 s;
	tf_sigv4_sign(&r, &s);
	assert_non_null(strstr(s.canonical_request, "\nParam1=Value1&Param1=value2\n"));
	assert_non_null(strstr(s.string_to_sign,
	                       "704b4cef673542d84cdff252633f065e8daeba5f168b77116f8b1bcaf3d38f89"));
	assert_string_equal(s.signature,
	                    "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1");
	tf_sigv4_release(&s);
}

static void test_sigv4_post_vanilla_query(void **state)
{
	(void)state;
	struct tf_sigv4_kv q[] = {{"Param1", "value1"}};
	struct tf_sigv4_req r = suite_req("POST", q, 1);
	struct tf_sigv4 s;
	tf_sigv4_sign(&r, &s);
	assert_non_null(strstr(s.string_to_sign,
	                       "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd"));
	assert_string_equal(s.signature,
	                    "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11");
	tf_sigv4_release(&s);
}

/* The S3 API reference examples: bucket examplebucket, 2013-05-24. */
static struct tf_sigv4_req s3_req(const char *method, const char *path, const struct tf_sigv4_kv *h,
                                  size_t nh, const char *payload)
{
	struct tf_sigv4_req r = {
	    .method = method,
	    .path = path,
	    .headers = h,
	    .nheaders = nh,
	    .payload_sha256 = payload,
	    .amz_date = "20130524T000000Z",
	    .region = "us-east-1",
	    .service = "s3",
	    .access_key = "AKIAIOSFODNN7EXAMPLE",
	    .secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	};
	return r;
}

static void test_sigv4_s3_get_object(void **state)
{
	(void)state;
	struct tf_sigv4_kv h[] = {
	    {"Host", "examplebucket.s3.amazonaws.com"},
	    {"Range", "bytes=0-9"},
	    {"x-amz-content-sha256", EMPTY_SHA},
	    {"x-amz-date", "20130524T000000Z"},
	};
	struct tf_sigv4_req r = s3_req("GET", "/test.txt", h, 4, EMPTY_SHA);
	struct tf_sigv4 s;
	tf_sigv4_sign(&r, &s);
	assert_string_equal(s.canonical_request,
	                    "GET\n/test.txt\n\n"
	                    "host:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
	                    "x-amz-content-sha256:" EMPTY_SHA "\nx-amz-date:20130524T000000Z\n\n"
	                    "host;range;x-amz-content-sha256;x-amz-date\n" EMPTY_SHA);
	assert_string_equal(
	    s.string_to_sign,
	    "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
	    "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
	assert_string_equal(s.signature,
	                    "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
	assert_string_equal(s.signed_headers, "host;range;x-amz-content-sha256;x-amz-date");
	tf_sigv4_release(&s);
}

static void test_sigv4_s3_put_object(void **state)
{
	(void)state;
	char payload[65];
	tf_sha256_hex("Welcome to Amazon S3.", 21, payload);
	assert_string_equal(payload,
	                    "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
	struct tf_sigv4_kv h[] = {
	    {"Host", "examplebucket.s3.amazonaws.com"},
	    {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
	    {"x-amz-date", "20130524T000000Z"},
	    {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
	    {"x-amz-content-sha256", payload},
	};
	/* '$' in the key is encoded in the canonical URI */
	struct tf_sigv4_req r = s3_req("PUT", "/test$file.text", h, 5, payload);
	struct tf_sigv4 s;
	tf_sigv4_sign(&r, &s);
	assert_non_null(strstr(s.canonical_request, "PUT\n/test%24file.text\n\n"));
	assert_non_null(strstr(s.string_to_sign,
	                       "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d"));
	assert_string_equal(s.signature,
	                    "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
	tf_sigv4_release(&s);
}

static void test_sigv4_s3_bucket_queries(void **state)
{
	(void)state;
	struct tf_sigv4_kv h[] = {
	    {"host", "examplebucket.s3.amazonaws.com"},
	    {"x-amz-content-sha256", EMPTY_SHA},
	    {"x-amz-date", "20130524T000000Z"},
	};
	/* GET ?lifecycle: a parameter without a value is signed as "lifecycle=" */
	struct tf_sigv4_kv q1[] = {{"lifecycle", ""}};
	struct tf_sigv4_req r = s3_req("GET", "/", h, 3, EMPTY_SHA);
	r.query = q1;
	r.nquery = 1;
	struct tf_sigv4 s;
	tf_sigv4_sign(&r, &s);
	assert_non_null(strstr(s.canonical_request, "GET\n/\nlifecycle=\n"));
	assert_string_equal(s.signature,
	                    "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
	tf_sigv4_release(&s);
	/* GET Bucket (list objects) with prefix=J and max-keys=2, given out of order */
	struct tf_sigv4_kv q2[] = {{"prefix", "J"}, {"max-keys", "2"}};
	r.query = q2;
	r.nquery = 2;
	tf_sigv4_sign(&r, &s);
	assert_non_null(strstr(s.canonical_request, "\nmax-keys=2&prefix=J\n"));
	assert_string_equal(s.signature,
	                    "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
	tf_sigv4_release(&s);
}

static void test_sigv4_encoding_helpers(void **state)
{
	(void)state;
	char *e = tf_sigv4_uri_encode("a b/c~d*é", 0);
	assert_string_equal(e, "a%20b%2Fc~d%2A%C3%A9");
	free(e);
	e = tf_sigv4_uri_encode("runs/7/x y.bin", 1);
	assert_string_equal(e, "runs/7/x%20y.bin");
	free(e);
	struct tf_sigv4_kv q[] = {{"uploads", ""}, {"prefix", "a/b c"}, {"list-type", "2"}};
	e = tf_sigv4_query_string(q, 3);
	assert_string_equal(e, "list-type=2&prefix=a%2Fb%20c&uploads=");
	free(e);
	char d[17];
	tf_sigv4_amz_date(1440938160.0, d);
	assert_string_equal(d, "20150830T123600Z");
	/* header values are trimmed and inner runs of spaces collapse */
	struct tf_sigv4_kv h[] = {
	    {"Host", "h"}, {"X-Amz-Date", "20150830T123600Z"}, {"My-Header1", "  a   b  c "}};
	struct tf_sigv4_req r = suite_req("GET", NULL, 0);
	r.headers = h;
	r.nheaders = 3;
	struct tf_sigv4 s;
	tf_sigv4_sign(&r, &s);
	assert_non_null(strstr(s.canonical_request, "\nmy-header1:a b c\n"));
	tf_sigv4_release(&s);
	tf_sigv4_release(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sigv4_get_vanilla),
	    cmocka_unit_test(test_sigv4_query_order_key_case),
	    cmocka_unit_test(test_sigv4_query_order_key),
	    cmocka_unit_test(test_sigv4_post_vanilla_query),
	    cmocka_unit_test(test_sigv4_s3_get_object),
	    cmocka_unit_test(test_sigv4_s3_put_object),
	    cmocka_unit_test(test_sigv4_s3_bucket_queries),
	    cmocka_unit_test(test_sigv4_encoding_helpers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
