/* obj_s3.c — the s3:// backend (being written: until it lands, opening s3:// says so). */
#include "storage/objstore_int.h"

#include <errno.h>
#include <stdio.h>

int tf_objstore_s3_open(struct tf_objstore *s, const char *bucket_and_prefix,
			const struct tf_objstore_opts *opts, char *err, size_t errlen)
{
	(void)s;
	(void)opts;
	snprintf(err, errlen, "cannot open 's3://%s': the s3 backend is not in this build yet",
		 bucket_and_prefix);
	return -ENOTSUP;
}
