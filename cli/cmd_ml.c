/* cmd_ml.c — the training workload's commands: `data prep`, `train`, `eval`, `predict`.
 * Each opens the object store (--store URL, else the state home's store), calls ml/ and
 * prints a summary (one JSON document on stdout with --json). Training progress goes to
 * stderr: a bar on a terminal, plain lines otherwise, JSON lines with --json. */
#include "cli/cli.h"
#include "common/buf.h"
#include "common/common.h"
#include "ml/bundle.h"
#include "ml/dataset.h"
#include "ml/input.h"
#include "ml/npy.h"
#include "ml/steps.h"
#include "ml/train.h"
#include "orchestrator/pipeline.h"
#include "storage/objstore.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_DATASET_PREFIX "datasets/fashion-mnist/"
#define DEFAULT_DATASET DEFAULT_DATASET_PREFIX "manifest.json"

static int exit_for(int rc)
{
	switch (rc) {
	case 0:
		return TF_EXIT_OK;
	case -EINVAL:
		return TF_EXIT_USAGE;
	case -EBADMSG:
	case -ENOENT:
		return TF_EXIT_DATAERR;
	case -ERANGE:
	case -ECANCELED:
	case -EINTR:
		return TF_EXIT_FAILED;
	default:
		return tf_objstore_retryable(rc) ? TF_EXIT_UNAVAILABLE : TF_EXIT_FAILED;
	}
}

/* Opens --store URL or the state home's store. */
static int open_store(const char *cmd, const char *url, struct tf_cli *cli,
                      struct tf_objstore **out)
{
	char err[1024];
	char *u = NULL;
	if (!url && !(url = u = tf_cli_home_store_url(cli)))
		return TF_EXIT_CONFIG;
	int rc = tf_objstore_open(url, out, err, sizeof err);
	free(u);
	if (rc) {
		fprintf(stderr, "tpuflow %s: %s\n", cmd, err);
		return exit_for(rc);
	}
	return 0;
}

static int parse_u64(const char *cmd, const char *flag, const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!*s || *end || errno || *s == '-')
		return tf_cli_usage_error(cmd, "%s wants a non-negative integer, not '%s'", flag,
		                          s);
	*out = v;
	return 0;
}

/* ---- flags from the step-kind table ----
 * `data prep`, `train` and `eval` take the `with` keys of their pipeline step kinds as flags
 * (`checkpoint_every` is --checkpoint-every), read from the kind's row: their names, whether
 * they take a value, their help and the checks of their values are the table's, and the
 * options they make are filled by the same ml/ function the step calls
 * (tf_ml_*_opts_from_with). Each command adds only what a pipeline step has no key for. */

#define WITH_OPT 0x4000 /* option codes WITH_OPT + i: the kind's i-th `with` key */

struct with_flags {
	const char *cmd;                /* "train", for messages */
	const struct tf_with_key *keys; /* the kind's rows */
	size_t n;                       /* how many */
	struct option *opts;            /* common, the keys', then the command's own; NULL-ended */
	char **names;                   /* the keys as flag names (owned) */
	json_t *with;                   /* the values given, as `with` */
	int exit;                       /* the exit code of a bad value (WITH_BAD) */
};

/* renames: NULL, or pairs KEY, FLAG, ... NULL for a key whose flag is not the key's own name
 * (the command already gives that name another meaning). */
static void with_flags_init(struct with_flags *f, const char *cmd, const char *kind,
                            const struct option *own, const char *const *renames)
{
	static const struct option common[] = {TF_CLI_COMMON_OPTIONS};
	const struct tf_step_schema *sc = tf_step_schema_find(kind);
	size_t nown = 0, nc = TF_ARRAY_LEN(common);
	while (own[nown].name)
		nown++;
	f->cmd = cmd;
	f->keys = sc->with;
	for (f->n = 0; f->keys[f->n].key; f->n++)
		;
	f->names = tf_xcalloc(f->n, sizeof(*f->names));
	f->opts = tf_xcalloc(nc + f->n + nown + 1, sizeof(*f->opts));
	memcpy(f->opts, common, sizeof(common));
	for (size_t i = 0; i < f->n; i++) {
		const char *flag = f->keys[i].key;
		for (const char *const *r = renames; r && *r; r += 2)
			if (!strcmp(r[0], flag))
				flag = r[1];
		f->names[i] = tf_xstrdup(flag);
		for (char *c = f->names[i]; *c; c++)
			if (*c == '_')
				*c = '-';
		f->opts[nc + i] = (struct option){
		    f->names[i],
		    f->keys[i].check == TF_WCHECK_BOOL ? no_argument : required_argument, NULL,
		    WITH_OPT + (int)i};
	}
	memcpy(f->opts + nc + f->n, own, nown * sizeof(*own));
	f->with = json_object();
}

/* The next option of argv that is not a `with` flag (those go into f->with, checked by their
 * row): its code, -1 after the last, or WITH_BAD with the usage error printed and its exit
 * code in f->exit. */
enum { WITH_BAD = -2 };
static int with_flags_next(struct with_flags *f, int argc, char **argv)
{
	int c;
	while ((c = getopt_long(argc, argv, "h", f->opts, NULL)) != -1) {
		if (c < WITH_OPT || c >= WITH_OPT + (int)f->n)
			return c;
		size_t i = (size_t)(c - WITH_OPT);
		char what[80], err[512];
		snprintf(what, sizeof(what), "--%s", f->names[i]);
		json_t *v = tf_with_key_value(&f->keys[i], optarg, what, err, sizeof(err));
		if (!v) {
			f->exit = tf_cli_usage_error(f->cmd, "%s", err);
			return WITH_BAD;
		}
		json_object_set_new(f->with, f->keys[i].key, v);
	}
	return -1;
}

/* After the options: no operand may follow. 0, or the usage error's exit code. */
static int with_flags_end(const struct with_flags *f, int argc, char **argv)
{
	return optind < argc ? tf_cli_usage_error(f->cmd, "unexpected argument '%s'", argv[optind])
	                     : 0;
}

/* The flags of the `with` keys, for the usage text. */
static void with_flags_usage(const struct with_flags *f, FILE *out)
{
	for (size_t i = 0; i < f->n; i++) {
		struct tf_buf b = {0};
		tf_with_key_describe(&f->keys[i], &b, "");
		static const char *const metavar[TF_WCHECK_LAST] = {[TF_WCHECK_STRING] = " S",
		                                                    [TF_WCHECK_INT] = " N",
		                                                    [TF_WCHECK_NUMBER] = " F",
		                                                    [TF_WCHECK_ENUM] = " WORD",
		                                                    [TF_WCHECK_INT_LIST] = " LIST",
		                                                    [TF_WCHECK_DURATION] = " DUR"};
		const char *mv = metavar[f->keys[i].check] ? metavar[f->keys[i].check] : "";
		fprintf(out, "  --%s%s  %s\n", f->names[i], mv, f->keys[i].help);
		if (f->keys[i].check != TF_WCHECK_STRING || f->keys[i].rules)
			fprintf(out, "      (%s)\n", tf_buf_str(&b));
		tf_buf_release(&b);
	}
}

static void with_flags_release(struct with_flags *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->names[i]);
	free(f->names);
	free(f->opts);
	json_decref(f->with);
}

/* ---- data prep ---- */

static void data_usage(const struct with_flags *f, FILE *out)
{
	fputs("usage: tpuflow data prep [options]\n"
	      "Converts a raw dataset into sharded TFRecord files of tf.train.Example records plus "
	      "a\nmanifest (counts, schema, preprocessing, per-shard CRC-32C), written last.\n"
	      "The keys of a pipeline's data_prep step (docs/pipeline.md), as flags:\n",
	      out);
	with_flags_usage(f, out);
	fputs("and:\n"
	      "  --out PREFIX       object key prefix (default " DEFAULT_DATASET_PREFIX ")\n"
	      "  --store URL        object store (default: the state home's store)\n"
	      "  --home DIR, --json, --help\n",
	      out);
}

static int data_prep(struct tf_cli *cli, const struct tf_prep_opts *popt, const char *out,
                     const char *store_url);

int cmd_data(int argc, char **argv, struct tf_cli *cli)
{
	enum { O_OUT = 1, O_STORE };
	static const struct option own[] = {
	    {"out", required_argument, NULL, O_OUT},
	    {"store", required_argument, NULL, O_STORE},
	    {0},
	};
	struct with_flags f;
	with_flags_init(&f, "data prep", "data_prep", own, NULL);
	struct tf_prep_opts po = {0};
	const char *out = DEFAULT_DATASET_PREFIX, *store_url = NULL;
	char err[1024];
	int c, rc = 0;
	optind = 1;
	if (argc < 2 || strcmp(argv[1], "prep")) {
		if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			data_usage(&f, stdout);
			rc = TF_EXIT_OK;
		} else {
			rc = tf_cli_usage_error("data", "the subcommand is 'prep'");
		}
		goto done;
	}
	argc--;
	argv++;
	while ((c = with_flags_next(&f, argc, argv)) != -1) {
		if (c == WITH_BAD) {
			rc = f.exit;
			goto done;
		} else if (c == 'h') {
			data_usage(&f, stdout);
			goto done;
		} else if (c == O_OUT) {
			out = optarg;
		} else if (c == O_STORE) {
			store_url = optarg;
		} else if (!tf_cli_common_option(cli, c, optarg)) {
			rc = tf_cli_usage_error("data prep", "unknown option");
			goto done;
		}
	}
	if ((rc = with_flags_end(&f, argc, argv)))
		goto done;
	if (tf_ml_prep_opts_from_with(f.with, &po, err, sizeof(err))) {
		rc = tf_cli_usage_error("data prep", "%s", err);
		goto done;
	}
	rc = data_prep(cli, &po, out, store_url);
done:
	with_flags_release(&f);
	return rc;
}

/* Runs data prep into --out of --store and prints what it wrote. */
static int data_prep(struct tf_cli *cli, const struct tf_prep_opts *popt, const char *out,
                     const char *store_url)
{
	struct tf_prep_opts po = *popt;
	int rc;
	struct tf_objstore *s;
	if ((rc = open_store("data prep", store_url, cli, &s)))
		return rc;
	char err[1024], *key = NULL, *prefix = NULL;
	json_t *manifest = NULL;
	size_t ol = strlen(out);
	prefix = ol && out[ol - 1] != '/' ? tf_xasprintf("%s/", out) : tf_xstrdup(out);
	double t0 = tf_now_monotonic();
	rc = tf_dataset_prep(s, prefix, &po, &key, &manifest, err, sizeof err);
	if (rc) {
		fprintf(stderr, "tpuflow data prep: %s\n", err);
		rc = exit_for(rc);
		goto out;
	}
	json_t *sp = json_object_get(manifest, "splits");
	json_int_t ntr =
	    json_integer_value(json_object_get(json_object_get(sp, "train"), "examples"));
	json_int_t nte =
	    json_integer_value(json_object_get(json_object_get(sp, "test"), "examples"));
	if (cli->json) {
		json_t *doc =
		    json_pack("{s:s, s:s, s:I, s:I, s:f, s:O}", "store", tf_objstore_url(s),
		              "dataset", key, "train_examples", ntr, "test_examples", nte,
		              "seconds", tf_now_monotonic() - t0, "manifest", manifest);
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else {
		printf("dataset %s (%lld train, %lld test examples) in %s, %.2f s\n", key,
		       (long long)ntr, (long long)nte, tf_objstore_url(s), tf_now_monotonic() - t0);
	}
out:
	json_decref(manifest);
	free(key);
	free(prefix);
	tf_objstore_free(s);
	return rc;
}

/* ---- progress rendering ---- */

struct progress {
	int mode;   /* 0 plain lines, 1 terminal bar, 2 JSON lines */
	int barlen; /* characters of the last bar drawn */
};

static void on_progress(void *data, const char *line)
{
	struct progress *p = data;
	if (p->mode == 2) {
		fprintf(stderr, "%s\n", line);
		return;
	}
	json_t *ev = json_loads(line, 0, NULL);
	if (!ev)
		return;
	const char *kind = json_string_value(json_object_get(ev, "event"));
	double epoch = json_number_value(json_object_get(ev, "epoch"));
	json_int_t epochs = json_integer_value(json_object_get(ev, "epochs"));
	json_int_t step = json_integer_value(json_object_get(ev, "step"));
	double eta = json_number_value(json_object_get(ev, "eta_seconds"));
	double eps = json_number_value(json_object_get(ev, "examples_per_second"));
	if (!kind) {
	} else if (!strcmp(kind, "start")) {
		fprintf(stderr,
		        "training on %s (%lld replicas), %lld steps of %lld per epoch, "
		        "%lld parameters, %s\n",
		        json_string_value(json_object_get(ev, "accelerator")),
		        (long long)json_integer_value(json_object_get(ev, "replicas")),
		        (long long)json_integer_value(json_object_get(ev, "total_steps")),
		        (long long)json_integer_value(json_object_get(ev, "steps_per_epoch")),
		        (long long)json_integer_value(json_object_get(ev, "params")),
		        json_string_value(json_object_get(ev, "optimizer")));
	} else if (!strcmp(kind, "step") && p->mode == 1) {
		int width = 24, fill = epochs ? (int)(width * epoch / (double)epochs) : 0;
		char bar[32];
		for (int i = 0; i < width; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[width] = 0;
		p->barlen = fprintf(stderr,
		                    "\r[%s] epoch %.2f/%lld step %lld loss %.4f acc %.4f "
		                    "%.0f ex/s ETA %.0fs ",
		                    bar, epoch, (long long)epochs, (long long)step,
		                    json_number_value(json_object_get(ev, "loss")),
		                    json_number_value(json_object_get(ev, "accuracy")), eps, eta);
	} else if (!strcmp(kind, "step")) {
		fprintf(stderr, "step %lld epoch %.2f loss %.4f acc %.4f %.0f ex/s ETA %.0fs\n",
		        (long long)step, epoch, json_number_value(json_object_get(ev, "loss")),
		        json_number_value(json_object_get(ev, "accuracy")), eps, eta);
	} else if (!strcmp(kind, "epoch")) {
		if (p->mode == 1 && p->barlen)
			fprintf(stderr, "\r%*s\r", p->barlen, "");
		fprintf(stderr,
		        "epoch %.0f/%lld step %lld: train loss %.4f acc %.4f | test loss "
		        "%.4f acc %.4f auc %.4f | %.0f ex/s, device %.2fs, MXU util %.1f%%, input "
		        "wait %.1f%%\n",
		        epoch, (long long)epochs, (long long)step,
		        json_number_value(json_object_get(ev, "train_loss")),
		        json_number_value(json_object_get(ev, "train_accuracy")),
		        json_number_value(json_object_get(ev, "loss")),
		        json_number_value(json_object_get(ev, "accuracy")),
		        json_number_value(json_object_get(ev, "auc")), eps,
		        json_number_value(json_object_get(ev, "device_seconds")),
		        100 * json_number_value(json_object_get(ev, "utilization")),
		        100 * json_number_value(json_object_get(ev, "input_wait")));
	} else if (!strcmp(kind, "resume")) {
		fprintf(stderr, "resuming from the checkpoint at step %lld\n", (long long)step);
	} else if (!strcmp(kind, "early_stop")) {
		fprintf(stderr, "early stop at step %lld: %s stopped improving\n", (long long)step,
		        json_string_value(json_object_get(ev, "monitor")));
	}
	json_decref(ev);
}

/* ---- train ---- */

static void train_usage(const struct with_flags *f, FILE *out)
{
	fputs("usage: tpuflow train [options]\n"
	      "Trains an MLP on an emulated TPU slice from a prepared dataset; checkpoints go "
	      "under\n--ckpt (a rerun resumes from the newest one), the model bundle to --export.\n"
	      "The keys of a pipeline's train step (docs/pipeline.md), as flags (--dataset "
	      "defaults to\n" DEFAULT_DATASET " here):\n",
	      out);
	with_flags_usage(f, out);
	fputs("and:\n"
	      "  --store URL          object store (default: the state home's store)\n"
	      "  --accelerator S      slice, e.g. v4-8 (default), v4-32, v5p-8, v5litepod-16\n"
	      "  --threads N          host threads running the replicas (default: all cores)\n"
	      "  --ckpt PREFIX        checkpoint key prefix (default runs/local/train/ckpt/)\n"
	      "  --no-ckpt            no checkpoints\n"
	      "  --keep N             checkpoints kept (default 3)\n"
	      "  --export DIR         write the model bundle to the local directory DIR\n"
	      "  --export-key PREFIX  or under this key prefix of the store\n"
	      "  --log-every N        steps between progress lines (default 50)\n"
	      "  --halt-after N       stop after step N as if killed (resume drills)\n"
	      "  --home DIR, --json (JSON lines on stderr, the summary on stdout), --help\n",
	      out);
}

static int train(struct tf_cli *cli, struct tf_train_opts *o, const char *store_url,
                 const char *export_dir);

int cmd_train(int argc, char **argv, struct tf_cli *cli)
{
	enum {
		O_STORE = 1,
		O_ACCEL,
		O_THREADS,
		O_CKPT,
		O_NOCKPT,
		O_KEEP,
		O_EXPORT,
		O_EXPORTKEY,
		O_LOGEVERY,
		O_HALT
	};
	static const struct option own[] = {
	    {"store", required_argument, NULL, O_STORE},
	    {"accelerator", required_argument, NULL, O_ACCEL},
	    {"threads", required_argument, NULL, O_THREADS},
	    {"ckpt", required_argument, NULL, O_CKPT},
	    {"no-ckpt", no_argument, NULL, O_NOCKPT},
	    {"keep", required_argument, NULL, O_KEEP},
	    {"export", required_argument, NULL, O_EXPORT},
	    {"export-key", required_argument, NULL, O_EXPORTKEY},
	    {"log-every", required_argument, NULL, O_LOGEVERY},
	    {"halt-after", required_argument, NULL, O_HALT},
	    {0},
	};
	struct with_flags f;
	with_flags_init(&f, "train", "train", own, NULL);
	struct tf_train_opts o = {.ckpt_prefix = "runs/local/train/ckpt/", .prefetch = 4};
	o.optim.schedule = TF_LR_COSINE;
	const char *store_url = NULL, *export_dir = NULL;
	char err[1024];
	uint64_t v;
	int c, rc = 0;
	optind = 1;
	while ((c = with_flags_next(&f, argc, argv)) != -1) {
		if (c == WITH_BAD) {
			rc = f.exit;
			goto done;
		}
		switch (c) {
		case 'h':
			train_usage(&f, stdout);
			goto done;
		case O_STORE:
			store_url = optarg;
			break;
		case O_ACCEL:
			o.accelerator = optarg;
			break;
		case O_THREADS:
			rc = parse_u64("train", "--threads", optarg, &v);
			o.host_threads = (int)v;
			break;
		case O_CKPT:
			o.ckpt_prefix = optarg;
			break;
		case O_NOCKPT:
			o.ckpt_prefix = NULL;
			break;
		case O_KEEP:
			rc = parse_u64("train", "--keep", optarg, &v);
			o.keep_checkpoints = (int)v;
			break;
		case O_EXPORT:
			export_dir = optarg;
			break;
		case O_EXPORTKEY:
			o.export_prefix = optarg;
			break;
		case O_LOGEVERY:
			rc = parse_u64("train", "--log-every", optarg, &o.log_every);
			break;
		case O_HALT:
			rc = parse_u64("train", "--halt-after", optarg, &o.halt_after);
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				rc = tf_cli_usage_error("train", "unknown option");
		}
		if (rc)
			goto done;
	}
	if ((rc = with_flags_end(&f, argc, argv)))
		goto done;
	if (!json_object_get(f.with, "dataset"))
		json_object_set_new(f.with, "dataset", json_string(DEFAULT_DATASET));
	if (tf_ml_train_opts_from_with(f.with, &o, err, sizeof(err))) {
		rc = tf_cli_usage_error("train", "%s", err);
		goto done;
	}
	rc = train(cli, &o, store_url, export_dir);
done:
	with_flags_release(&f);
	return rc;
}

/* Trains by o in --store (the bundle to --export when given) and prints the result. */
static int train(struct tf_cli *cli, struct tf_train_opts *popt, const char *store_url,
                 const char *export_dir)
{
	struct tf_train_opts o = *popt;
	int rc;
	struct tf_objstore *s = NULL, *es = NULL;
	char err[1024];
	if ((rc = open_store("train", store_url, cli, &s)))
		return rc;
	if (export_dir) {
		if ((rc = tf_objstore_open(export_dir, &es, err, sizeof err))) {
			fprintf(stderr, "tpuflow train: %s\n", err);
			tf_objstore_free(s);
			return exit_for(rc);
		}
		o.export_store = es;
		o.export_prefix = "";
	}
	struct progress pr = {.mode = cli->json ? 2 : isatty(2) ? 1 : 0};
	o.store = s;
	o.progress = on_progress;
	o.progress_data = &pr;
	struct tf_train_result r;
	rc = tf_train_run(&o, &r, err, sizeof err);
	if (rc && rc != -EINTR) {
		fprintf(stderr, "tpuflow train: %s\n", err);
		rc = exit_for(rc);
		goto out;
	}
	if (cli->json) {
		json_t *doc = json_pack(
		    "{s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:b, s:b, "
		    "s:s, s:s}",
		    "steps", (json_int_t)r.steps, "resumed_from", (json_int_t)r.resumed_from,
		    "epochs", r.epochs_done, "loss", r.loss, "accuracy", r.accuracy, "auc",
		    isnan(r.auc) ? 0.0 : r.auc, "train_loss", r.train_loss, "train_accuracy",
		    r.train_accuracy, "examples_per_second", r.examples_per_second, "wall_seconds",
		    r.wall_seconds, "device_seconds", r.device_seconds, "utilization",
		    r.utilization, "input_wait", r.input_wait, "early_stopped", r.early_stopped,
		    "halted", r.halted, "checkpoint", r.checkpoint, "bundle",
		    export_dir ? export_dir : r.bundle);
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else if (rc == -EINTR) {
		printf("halted after step %llu; checkpoint %s\n", (unsigned long long)r.steps,
		       r.checkpoint[0] ? r.checkpoint : "(none)");
	} else {
		printf("trained %llu steps (%.2f epochs) in %.2f s: test accuracy %.4f, loss %.4f, "
		       "AUC %.4f; %.0f examples/s, device %.2f s, MXU utilization %.1f%%, input "
		       "wait %.1f%%\n",
		       (unsigned long long)r.steps, r.epochs_done, r.wall_seconds, r.accuracy,
		       r.loss, r.auc, r.examples_per_second, r.device_seconds, 100 * r.utilization,
		       100 * r.input_wait);
		if (r.checkpoint[0])
			printf("checkpoint %s\n", r.checkpoint);
		if (export_dir || r.bundle[0])
			printf("bundle %s\n", export_dir ? export_dir : r.bundle);
	}
	rc = rc == -EINTR ? TF_EXIT_FAILED : TF_EXIT_OK;
out:
	tf_objstore_free(es);
	tf_objstore_free(s);
	return rc;
}

/* ---- eval ---- */

static void eval_usage(const struct with_flags *f, FILE *out)
{
	fputs("usage: tpuflow eval --model DIR [options]\n"
	      "Evaluates an exported model bundle on the test split of a dataset, on an emulated "
	      "slice.\n"
	      "The keys of a pipeline's evaluate step (docs/pipeline.md), as flags (--dataset "
	      "defaults to\n" DEFAULT_DATASET " here):\n",
	      out);
	with_flags_usage(f, out);
	fputs("and:\n"
	      "  --model DIR          bundle directory (instead of --model-key)\n"
	      "  --store URL          object store (default: the state home's store)\n"
	      "  --accelerator S      slice (default v4-8)\n"
	      "  --home DIR, --json, --help\n",
	      out);
}

int cmd_eval(int argc, char **argv, struct tf_cli *cli)
{
	/* The evaluate kind's `with` keys are the flags, but its `model` (a bundle's key in the
	 * store) is --model-key: --model here is a local bundle directory, which a step has no
	 * key for (a step's bundles are in its run's store). Not derived either: --store and
	 * --accelerator, which a step takes from its run (`storage:`, the slice it was given). */
	static const char *const renames[] = {"model", "model-key", NULL};
	enum { O_MODEL = 1, O_STORE, O_ACCEL };
	static const struct option own[] = {
	    {"model", required_argument, NULL, O_MODEL},
	    {"store", required_argument, NULL, O_STORE},
	    {"accelerator", required_argument, NULL, O_ACCEL},
	    {0},
	};
	struct with_flags f;
	with_flags_init(&f, "eval", "evaluate", own, renames);
	const char *model = NULL, *store_url = NULL, *accel = "v4-8";
	int c, rc = 0;
	struct tf_objstore *s = NULL, *ms = NULL;
	struct tf_bundle *b = NULL;
	char err[1024];
	optind = 1;
	while ((c = with_flags_next(&f, argc, argv)) != -1) {
		if (c == WITH_BAD) {
			rc = f.exit;
			goto out;
		}
		switch (c) {
		case 'h':
			eval_usage(&f, stdout);
			goto out;
		case O_MODEL:
			model = optarg;
			break;
		case O_STORE:
			store_url = optarg;
			break;
		case O_ACCEL:
			accel = optarg;
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg)) {
				rc = tf_cli_usage_error("eval", "unknown option");
				goto out;
			}
		}
	}
	if ((rc = with_flags_end(&f, argc, argv)))
		goto out;
	const char *model_key = json_string_value(json_object_get(f.with, "model"));
	const char *dataset = json_string_value(json_object_get(f.with, "dataset"));
	if (!dataset)
		dataset = DEFAULT_DATASET;
	if (!model == !model_key) {
		rc = tf_cli_usage_error("eval", "give one of --model DIR or --model-key PREFIX");
		goto out;
	}
	struct tf_eval_result ev;
	if ((rc = open_store("eval", store_url, cli, &s)))
		goto out;
	if ((model && (rc = tf_objstore_open(model, &ms, err, sizeof err))) ||
	    (rc = tf_bundle_load(ms ? ms : s, ms ? "" : model_key, &b, err, sizeof err)) ||
	    (rc = tf_bundle_evaluate(s, b, dataset, accel, NULL, &ev, err, sizeof err))) {
		fprintf(stderr, "tpuflow eval: %s\n", err);
		rc = exit_for(rc);
		goto out;
	}
	if (cli->json)
		printf("{\"examples\":%zu,\"loss\":%.17g,\"accuracy\":%.17g,\"auc\":%.17g}\n", ev.n,
		       ev.loss, ev.accuracy, isnan(ev.auc) ? 0.0 : ev.auc);
	else
		printf("%zu examples: accuracy %.4f, loss %.4f, AUC %.4f\n", ev.n, ev.accuracy,
		       ev.loss, ev.auc);
out:
	tf_bundle_free(b);
	tf_objstore_free(ms);
	tf_objstore_free(s);
	with_flags_release(&f);
	return rc;
}

/* ---- predict ---- */

static const char predict_usage[] =
    "usage: tpuflow predict --model DIR --input X.npy [--out Y.npy] [--threads N]\n"
    "CPU inference from a model bundle with the MXU numerics it was trained with (bf16\n"
    "inputs, fp32 systolic accumulation): bit-identical to evaluation on the slice.\n"
    "  --model DIR    bundle directory (file:// or s3:// URLs work too)\n"
    "  --input X.npy  raw inputs: uint8 or float pixels (N x 784 or N x 28 x 28) for image\n"
    "                 models, float features for tabular ones; the bundle's preprocessing is\n"
    "                 applied unless --preprocessed\n"
    "  --out Y.npy    write probabilities (float32, N x classes) here\n"
    "  --preprocessed the input is already preprocessed (float32)\n"
    "  --threads N    host threads (default 1; results do not depend on it)\n"
    "  --json, --help\n";

int cmd_predict(int argc, char **argv, struct tf_cli *cli)
{
	enum { O_MODEL = 1, O_INPUT, O_OUT, O_PRE, O_THREADS };
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"model", required_argument, NULL, O_MODEL},
	    {"input", required_argument, NULL, O_INPUT},
	    {"out", required_argument, NULL, O_OUT},
	    {"preprocessed", no_argument, NULL, O_PRE},
	    {"threads", required_argument, NULL, O_THREADS},
	    {0},
	};
	const char *model = NULL, *input = NULL, *outp = NULL;
	int pre = 0, c, rc;
	uint64_t threads = 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			fputs(predict_usage, stdout);
			return TF_EXIT_OK;
		case O_MODEL:
			model = optarg;
			break;
		case O_INPUT:
			input = optarg;
			break;
		case O_OUT:
			outp = optarg;
			break;
		case O_PRE:
			pre = 1;
			break;
		case O_THREADS:
			if ((rc = parse_u64("predict", "--threads", optarg, &threads)))
				return rc;
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("predict", "unknown option");
		}
	}
	if (!model || !input)
		return tf_cli_usage_error("predict", "--model DIR and --input X.npy are required");
	struct tf_objstore *ms = NULL;
	struct tf_bundle *b = NULL;
	float *probs = NULL;
	size_t n = 0;
	char err[1024];
	double t0 = tf_now_monotonic();
	if ((rc = tf_objstore_open(model, &ms, err, sizeof err)) ||
	    (rc = tf_bundle_load(ms, "", &b, err, sizeof err)) ||
	    (rc = tf_bundle_predict_npy(b, input, pre, (int)threads, &probs, &n, err, sizeof err)))
		goto fail;
	size_t C = tf_mlp_outputs(&b->mlp);
	double secs = tf_now_monotonic() - t0;
	if (outp && (rc = tf_npy_write_f32(outp, probs, n, C))) {
		snprintf(err, sizeof err, "cannot write '%s': %s", outp, strerror(-rc));
		goto fail;
	}
	if (cli->json) {
		json_t *preds = json_array();
		for (size_t i = 0; i < n; i++) {
			size_t best = 0;
			for (size_t j = 1; j < C; j++)
				if (probs[i * C + j] > probs[i * C + best])
					best = j;
			int cls = C == 1 ? probs[i] > 0.5f : (int)best;
			json_array_append_new(
			    preds,
			    json_pack("{s:i, s:s, s:f}", "class", cls, "label", b->class_names[cls],
			              "probability",
			              C == 1 ? (double)probs[i] : (double)probs[i * C + best]));
		}
		json_t *doc = json_pack("{s:I, s:f, s:o}", "rows", (json_int_t)n, "seconds", secs,
		                        "predictions", preds);
		tf_cli_print_json(stdout, doc);
		json_decref(doc);
	} else {
		size_t show = n < 10 ? n : 10;
		for (size_t i = 0; i < show; i++) {
			size_t best = 0;
			for (size_t j = 1; j < C; j++)
				if (probs[i * C + j] > probs[i * C + best])
					best = j;
			int cls = C == 1 ? probs[i] > 0.5f : (int)best;
			printf("%zu\t%d\t%s\t%.4f\n", i, cls, b->class_names[cls],
			       C == 1 ? probs[i] : probs[i * C + best]);
		}
		if (n > show)
			printf("... %zu rows in %.3f s%s%s\n", n, secs, outp ? "; all in " : "",
			       outp ? outp : "");
	}
	rc = TF_EXIT_OK;
	goto out;
fail:
	fprintf(stderr, "tpuflow predict: %s\n", err);
	rc = exit_for(rc);
out:
	free(probs);
	tf_bundle_free(b);
	tf_objstore_free(ms);
	return rc;
}
