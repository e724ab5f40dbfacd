/* cmd_store.c — `tpuflow store ls|cat|get|put|rm|mb` and `tpuflow ckpt list|show|gc`: object
 * storage and checkpoints for people.
 *
 * A LOCATION names a store and a key (or key prefix) in it:
 *   s3://BUCKET/KEY      an S3 bucket (settings from AWS_* variables)
 *   file:///DIR/KEY      a local directory tree (keys relative to '/')
 *   KEY                  a key in the state home's store ($TPUFLOW_STORE, else HOME/objects)
 */
#include "cli/cli.h"
#include "common/common.h"
#include "storage/ckpt.h"
#include "storage/objstore.h"

#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Maps a storage error code to an exit code. */
static int exit_for(int rc)
{
	if (tf_objstore_retryable(rc))
		return TF_EXIT_UNAVAILABLE;
	switch (rc) {
	case -EACCES:
		return TF_EXIT_CONFIG;
	case -EINVAL:
		return TF_EXIT_USAGE;
	case -EBADMSG:
	case -ELOOP: /* file:// refuses a key through a link planted in its root */
		return TF_EXIT_DATAERR;
	default:
		return TF_EXIT_FAILED;
	}
}

/* Opens the store LOCATION lives in; *key receives the key/prefix part (a new string). */
static int open_location(const char *cmd, const char *loc, struct tf_cli *cli,
                         struct tf_objstore **out, char **key)
{
	char err[1024];
	char *url = NULL, *rest = NULL;
	if (!strncmp(loc, "s3://", 5)) {
		const char *slash = strchr(loc + 5, '/');
		url = slash ? tf_xasprintf("%.*s", (int)(slash - loc), loc) : tf_xstrdup(loc);
		rest = tf_xstrdup(slash ? slash + 1 : "");
	} else if (!strncmp(loc, "file://", 7)) {
		const char *p = loc + 7;
		if (*p == '/') {
			url = tf_xstrdup("file:///");
			rest = tf_xstrdup(p + 1);
		} else {
			url = tf_xstrdup("file://.");
			rest = tf_xstrdup(p);
		}
	} else {
		if (!(url = tf_cli_home_store_url(cli)))
			return TF_EXIT_CONFIG;
		rest = tf_xstrdup(loc);
	}
	int rc = tf_objstore_open(url, out, err, sizeof err);
	if (rc) {
		fprintf(stderr, "tpuflow %s: %s\n", cmd, err);
		free(url);
		free(rest);
		return exit_for(rc);
	}
	free(url);
	*key = rest;
	return 0;
}

static int store_fail(const char *cmd, struct tf_objstore *s, int rc)
{
	fprintf(stderr, "tpuflow %s: %s\n", cmd, tf_objstore_errmsg(s));
	return exit_for(rc);
}

static void iso_time(double t, char out[32])
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static const char store_usage[] =
    "usage: tpuflow store [--json] VERB LOCATION...\n"
    "  ls [LOCATION]         list objects whose keys start with LOCATION's key (default:\n"
    "                        every object of the state home's store)\n"
    "  cat LOCATION          write an object to stdout\n"
    "  get LOCATION FILE     download an object into FILE (atomically)\n"
    "  put LOCATION [FILE]   upload FILE (default: stdin); --once refuses to overwrite\n"
    "  rm LOCATION...        delete objects\n"
    "  mb s3://BUCKET        create a bucket\n"
    "LOCATION: s3://BUCKET/KEY, file:///DIR/KEY, or KEY in the state home's store\n"
    "($TPUFLOW_STORE, else HOME/objects). s3:// uses AWS_ENDPOINT_URL, AWS_REGION,\n"
    "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN.\n"
    "options: --once (put: write-once), --home DIR, --json, --help\n";

/* Reads all of stdin into a new buffer. */
static int read_stdin(char **out, size_t *len)
{
	size_t cap = 65536, n = 0;
	char *buf = tf_xmalloc(cap);
	for (;;) {
		if (n == cap)
			buf = tf_xrealloc(buf, cap *= 2);
		size_t r = fread(buf + n, 1, cap - n, stdin);
		n += r;
		if (r == 0)
			break;
	}
	if (ferror(stdin)) {
		free(buf);
		return -EIO;
	}
	*out = buf;
	*len = n;
	return 0;
}

static int store_ls(struct tf_objstore *s, const char *prefix, struct tf_cli *cli)
{
	struct tf_obj_list l = {0};
	int rc = tf_objstore_list(s, prefix, &l);
	if (rc)
		return store_fail("store ls", s, rc);
	if (cli->json) {
		json_t *doc = json_object(), *arr = json_array();
		json_object_set_new(doc, "store", json_string(tf_objstore_url(s)));
		json_object_set_new(doc, "prefix", json_string(prefix));
		for (size_t i = 0; i < l.n; i++) {
			json_t *e = json_object();
			json_object_set_new(e, "key", json_string(l.v[i].key));
			json_object_set_new(e, "size", json_integer((json_int_t)l.v[i].size));
			json_object_set_new(e, "mtime", json_real(l.v[i].mtime));
			json_array_append_new(arr, e);
		}
		json_object_set_new(doc, "objects", arr);
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else {
		for (size_t i = 0; i < l.n; i++) {
			char t[32];
			iso_time(l.v[i].mtime, t);
			printf("%12" PRIu64 "  %s  %s\n", l.v[i].size, t, l.v[i].key);
		}
	}
	tf_obj_list_release(&l);
	return TF_EXIT_OK;
}

int cmd_store(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"once", no_argument, NULL, 'o'},
	    {0, 0, 0, 0},
	};
	int once = 0, c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			fputs(store_usage, stdout);
			return TF_EXIT_OK;
		}
		if (c == 'o') {
			once = 1;
			continue;
		}
		return tf_cli_usage_error("store", "unknown option");
	}
	int nargs = argc - optind;
	char **args = argv + optind;
	int ret = TF_EXIT_OK;
	struct tf_objstore *s = NULL;
	char *key = NULL;
	const char *verb = nargs ? args[0] : NULL;
	static char *const home_root[] = {"ls", ""};
	if (verb && nargs == 1 && !strcmp(verb, "ls")) {
		args = (char **)home_root; /* like ls(1): no LOCATION lists everything here */
		nargs = 2;
	}
	if (!verb || nargs < 2) {
		ret = tf_cli_usage_error("store", "%s",
		                         verb ? "give a LOCATION"
		                              : "give a verb: ls, cat, get, put, rm or mb");
		goto out;
	}
	if (!strcmp(verb, "rm")) {
		for (int i = 1; i < nargs && ret == TF_EXIT_OK; i++) {
			if ((ret = open_location("store rm", args[i], cli, &s, &key)))
				break;
			int rc = tf_objstore_delete(s, key);
			if (rc)
				ret = store_fail("store rm", s, rc);
			tf_objstore_free(s);
			s = NULL;
			free(key);
			key = NULL;
		}
		goto out;
	}
	if (strcmp(verb, "ls") && strcmp(verb, "cat") && strcmp(verb, "get") &&
	    strcmp(verb, "put") && strcmp(verb, "mb")) {
		ret = tf_cli_usage_error(
		    "store", "unknown verb '%s': use ls, cat, get, put, rm or mb", verb);
		goto out;
	}
	if ((ret = open_location("store", args[1], cli, &s, &key)))
		goto out;
	int rc = 0;
	if (!strcmp(verb, "ls")) {
		ret = store_ls(s, key, cli);
	} else if (!strcmp(verb, "mb")) {
		if (strncmp(args[1], "s3://", 5) || *key) {
			ret = tf_cli_usage_error("store", "mb takes s3://BUCKET");
			goto out;
		}
		rc = tf_objstore_create_bucket(s);
	} else if (!strcmp(verb, "cat")) {
		void *data;
		size_t len;
		rc = tf_objstore_get(s, key, &data, &len);
		if (!rc) {
			if (fwrite(data, 1, len, stdout) != len || fflush(stdout))
				ret = TF_EXIT_FAILED;
			free(data);
		}
	} else if (!strcmp(verb, "get")) {
		if (nargs < 3) {
			ret = tf_cli_usage_error("store", "get needs LOCATION FILE");
			goto out;
		}
		rc = tf_objstore_get_file(s, key, args[2]);
	} else { /* put */
		unsigned flags = once ? TF_OBJ_IF_NONE_MATCH : 0;
		if (nargs >= 3 && strcmp(args[2], "-")) {
			rc = tf_objstore_put_file(s, key, args[2], flags);
		} else {
			char *data;
			size_t len;
			if (read_stdin(&data, &len)) {
				fprintf(stderr, "tpuflow store: cannot read stdin\n");
				ret = TF_EXIT_FAILED;
				goto out;
			}
			rc = tf_objstore_put(s, key, data, len, flags);
			free(data);
		}
	}
	if (rc)
		ret = store_fail("store", s, rc);
out:
	tf_objstore_free(s);
	free(key);
	return ret;
}

static const char ckpt_usage[] =
    "usage: tpuflow ckpt [--json] VERB LOCATION ...\n"
    "  list LOCATION         complete checkpoints under the prefix, oldest first\n"
    "  show LOCATION [STEP]  one checkpoint's manifest (default: the latest)\n"
    "  gc LOCATION --keep N [--pin STEP]... [--grace SECONDS] [--dry-run]\n"
    "                        keep the newest N (and pinned steps), delete the rest, orphaned\n"
    "                        shards older than the grace period (default 3600 s) and\n"
    "                        abandoned multipart uploads\n"
    "LOCATION is a checkpoint prefix: s3://BUCKET/PREFIX, file:///DIR/PREFIX or a prefix in\n"
    "the state home's store (e.g. runs/RUN/STEP/ckpt).\n";

static int ckpt_list(struct tf_objstore *s, const char *prefix, struct tf_cli *cli)
{
	struct tf_ckpt_info *v = NULL;
	size_t n = 0;
	int rc = tf_ckpt_list(s, prefix, &v, &n);
	if (rc)
		return store_fail("ckpt list", s, rc);
	if (cli->json) {
		json_t *doc = json_object(), *arr = json_array();
		json_object_set_new(doc, "store", json_string(tf_objstore_url(s)));
		json_object_set_new(doc, "prefix", json_string(prefix));
		for (size_t i = 0; i < n; i++) {
			json_t *e = json_object();
			json_object_set_new(e, "step", json_integer(v[i].step));
			json_object_set_new(e, "created", json_real(v[i].created));
			json_object_set_new(e, "tensors", json_integer((json_int_t)v[i].tensors));
			json_object_set_new(e, "bytes", json_integer((json_int_t)v[i].bytes));
			json_array_append_new(arr, e);
		}
		json_object_set_new(doc, "checkpoints", arr);
		json_object_set_new(doc, "latest", n ? json_integer(v[n - 1].step) : json_null());
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else if (n == 0) {
		printf("no complete checkpoint under '%s' in %s\n", prefix, tf_objstore_url(s));
	} else {
		printf("%12s  %-20s  %7s  %14s\n", "STEP", "CREATED", "TENSORS", "BYTES");
		for (size_t i = 0; i < n; i++) {
			char t[32];
			iso_time(v[i].created, t);
			printf("%12" PRId64 "  %-20s  %7zu  %14" PRIu64 "\n", v[i].step, t,
			       v[i].tensors, v[i].bytes);
		}
	}
	free(v);
	return TF_EXIT_OK;
}

static int ckpt_show(struct tf_objstore *s, const char *prefix, const char *step_arg,
                     struct tf_cli *cli)
{
	int64_t step;
	int rc;
	if (step_arg) {
		char *end;
		step = strtoll(step_arg, &end, 10);
		if (*end || step < 0)
			return tf_cli_usage_error("ckpt", "STEP '%s' is not a step number",
			                          step_arg);
	} else if ((rc = tf_ckpt_latest(s, prefix, &step))) {
		return store_fail("ckpt show", s, rc);
	}
	char *json = NULL;
	if ((rc = tf_ckpt_manifest(s, prefix, step, &json)))
		return store_fail("ckpt show", s, rc);
	json_t *doc = json_loads(json, 0, NULL);
	free(json);
	if (cli->json) {
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
		return TF_EXIT_OK;
	}
	char t[32];
	iso_time(json_number_value(json_object_get(doc, "created")), t);
	char *meta = json_dumps(json_object_get(doc, "meta"), JSON_COMPACT | JSON_ENCODE_ANY);
	printf("checkpoint step %" PRId64 " under '%s' in %s\ncreated %s\nmeta %s\n", step, prefix,
	       tf_objstore_url(s), t, meta ? meta : "null");
	free(meta);
	printf("%-32s  %14s  %-8s  %s\n", "TENSOR", "BYTES", "CRC32C", "SHARD");
	json_t *arr = json_object_get(doc, "tensors"), *e;
	size_t i;
	json_array_foreach(arr, i, e)
	{
		printf("%-32s  %14" JSON_INTEGER_FORMAT "  %-8s  %s\n",
		       json_string_value(json_object_get(e, "name")),
		       json_integer_value(json_object_get(e, "bytes")),
		       json_string_value(json_object_get(e, "crc32c")),
		       json_string_value(json_object_get(e, "key")));
	}
	json_decref(doc);
	return TF_EXIT_OK;
}

int cmd_ckpt(int argc, char **argv, struct tf_cli *cli)
{
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"keep", required_argument, NULL, 'k'},
	    {"pin", required_argument, NULL, 'p'},
	    {"grace", required_argument, NULL, 'g'},
	    {"dry-run", no_argument, NULL, 'n'},
	    {0, 0, 0, 0},
	};
	struct tf_ckpt_gc_opts go = {.keep_last = -1, .grace = 3600};
	int64_t *pins = NULL;
	size_t npins = 0;
	int c, ret = TF_EXIT_OK;
	long long keep;
	char *end;
	optind = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (tf_cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'h':
			fputs(ckpt_usage, stdout);
			free(pins);
			return TF_EXIT_OK;
		case 'k':
			if (tf_cli_parse_int("ckpt", "--keep", optarg, 1, INT_MAX, &keep)) {
				free(pins);
				return TF_EXIT_USAGE;
			}
			go.keep_last = (int)keep;
			break;
		case 'p':
			pins = tf_xrealloc(pins, (npins + 1) * sizeof *pins);
			pins[npins] = strtoll(optarg, &end, 10);
			if (*end || pins[npins] < 0) {
				free(pins);
				return tf_cli_usage_error(
				    "ckpt", "--pin wants a step number, not '%s'", optarg);
			}
			npins++;
			break;
		case 'g':
			go.grace = strtod(optarg, &end);
			if (*end || go.grace < 0) {
				free(pins);
				return tf_cli_usage_error("ckpt", "--grace wants seconds, not '%s'",
				                          optarg);
			}
			break;
		case 'n':
			go.dry_run = 1;
			break;
		default:
			free(pins);
			return tf_cli_usage_error("ckpt", "unknown option");
		}
	}
	int nargs = argc - optind;
	char **args = argv + optind;
	struct tf_objstore *s = NULL;
	char *prefix = NULL;
	if (nargs < 2) {
		ret = tf_cli_usage_error("ckpt", "%s",
		                         nargs ? "give a checkpoint LOCATION"
		                               : "give a verb: list, show or gc");
		goto out;
	}
	const char *verb = args[0];
	if (strcmp(verb, "list") && strcmp(verb, "show") && strcmp(verb, "gc")) {
		ret = tf_cli_usage_error("ckpt", "unknown verb '%s': use list, show or gc", verb);
		goto out;
	}
	if (!strcmp(verb, "gc") && go.keep_last < 1) {
		ret =
		    tf_cli_usage_error("ckpt", "gc needs --keep N (the newest N checkpoints stay)");
		goto out;
	}
	if ((ret = open_location("ckpt", args[1], cli, &s, &prefix)))
		goto out;
	if (!strcmp(verb, "list")) {
		ret = ckpt_list(s, prefix, cli);
	} else if (!strcmp(verb, "show")) {
		ret = ckpt_show(s, prefix, nargs > 2 ? args[2] : NULL, cli);
	} else {
		go.pinned = pins;
		go.npinned = npins;
		struct tf_ckpt_gc_result r;
		int rc = tf_ckpt_gc(s, prefix, &go, &r);
		if (rc) {
			ret = store_fail("ckpt gc", s, rc);
			goto out;
		}
		if (cli->json) {
			json_t *doc = json_object();
			json_object_set_new(doc, "dry_run", json_boolean(go.dry_run));
			json_object_set_new(doc, "checkpoints_deleted",
			                    json_integer((json_int_t)r.ckpts_deleted));
			json_object_set_new(doc, "orphans_deleted",
			                    json_integer((json_int_t)r.orphans_deleted));
			json_object_set_new(doc, "uploads_aborted",
			                    json_integer((json_int_t)r.uploads_aborted));
			json_object_set_new(doc, "bytes_freed",
			                    json_integer((json_int_t)r.bytes_freed));
			tf_cli_print_json(stdout, doc);
			json_decref(doc);
		} else {
			printf(
			    "%s%zu checkpoint(s), %zu orphaned shard(s), %zu abandoned upload(s); "
			    "%" PRIu64 " bytes freed\n",
			    go.dry_run ? "would delete " : "deleted ", r.ckpts_deleted,
			    r.orphans_deleted, r.uploads_aborted, r.bytes_freed);
		}
	}
out:
	tf_objstore_free(s);
	free(prefix);
	free(pins);
	return ret;
}
