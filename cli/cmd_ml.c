/* cmd_ml.c — the training workload's commands: `data prep`, `train`, `eval`, `predict`.
 * Each opens the object store (--store URL, else the state home's store), calls ml/ and
 * prints a summary (one JSON document on stdout with --json). Training progress goes to
 * stderr: a bar on a terminal, plain lines otherwise, JSON lines with --json. */
#include "cli/cli.h"
#include "common/common.h"
#include "ml/bundle.h"
#include "ml/dataset.h"
#include "ml/input.h"
#include "ml/npy.h"
#include "ml/train.h"
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
	if (!url) {
		char *home = tf_cli_home(cli, 1);
		if (!home)
			return TF_EXIT_CONFIG;
		u = tf_objstore_home_url(home);
		free(home);
		url = u;
	}
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

static int parse_f(const char *cmd, const char *flag, const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (!*s || *end || !isfinite(v) || v < 0)
		return tf_cli_usage_error(cmd, "%s wants a non-negative number, not '%s'", flag, s);
	*out = v;
	return 0;
}

/* ---- data prep ---- */

static const char data_usage[] =
    "usage: tpuflow data prep [options]\n"
    "Converts a raw dataset into sharded TFRecord files of tf.train.Example records plus a\n"
    "manifest (counts, schema, preprocessing, per-shard CRC-32C), written last.\n"
    "  --source S         fashion-mnist (default) or csv\n"
    "  --path P           fashion-mnist directory (default " TF_FASHION_MNIST_DIR ")\n"
    "                     or the CSV file (header line, numeric columns)\n"
    "  --csv-label COL    CSV label column (default label); labels are integers 0..K-1\n"
    "  --test-fraction F  CSV: fraction held out as the test split (default 0.2)\n"
    "  --shards N         train shards (default 8); test gets max(1, N/4)\n"
    "  --seed N           CSV split seed (default 0)\n"
    "  --limit-train N    keep the first N train examples (default all)\n"
    "  --limit-test N     keep the first N test examples (default all)\n"
    "  --out PREFIX       object key prefix (default " DEFAULT_DATASET_PREFIX ")\n"
    "  --store URL        object store (default: the state home's store)\n"
    "  --home DIR, --json, --help\n";

int cmd_data(int argc, char **argv, struct tf_cli *cli)
{
	enum {
		O_SOURCE = 1,
		O_PATH,
		O_LABEL,
		O_TFRAC,
		O_SHARDS,
		O_SEED,
		O_LTR,
		O_LTE,
		O_OUT,
		O_STORE
	};
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"source", required_argument, NULL, O_SOURCE},
	    {"path", required_argument, NULL, O_PATH},
	    {"csv-label", required_argument, NULL, O_LABEL},
	    {"test-fraction", required_argument, NULL, O_TFRAC},
	    {"shards", required_argument, NULL, O_SHARDS},
	    {"seed", required_argument, NULL, O_SEED},
	    {"limit-train", required_argument, NULL, O_LTR},
	    {"limit-test", required_argument, NULL, O_LTE},
	    {"out", required_argument, NULL, O_OUT},
	    {"store", required_argument, NULL, O_STORE},
	    {0},
	};
	struct tf_prep_opts po = {0};
	const char *out = DEFAULT_DATASET_PREFIX, *store_url = NULL;
	uint64_t v;
	int c, rc;
	optind = 1;
	if (argc < 2 || strcmp(argv[1], "prep")) {
		if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
			fputs(data_usage, stdout);
			return TF_EXIT_OK;
		}
		return tf_cli_usage_error("data", "the subcommand is 'prep'");
	}
	argc--;
	argv++;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			fputs(data_usage, stdout);
			return TF_EXIT_OK;
		case O_SOURCE:
			po.source = optarg;
			break;
		case O_PATH:
			po.path = optarg;
			break;
		case O_LABEL:
			po.csv_label = optarg;
			break;
		case O_TFRAC:
			if ((rc = parse_f("data prep", "--test-fraction", optarg,
			                  &po.test_fraction)))
				return rc;
			break;
		case O_SHARDS:
			if ((rc = parse_u64("data prep", "--shards", optarg, &v)))
				return rc;
			po.shards = (int)v;
			break;
		case O_SEED:
			if ((rc = parse_u64("data prep", "--seed", optarg, &po.seed)))
				return rc;
			break;
		case O_LTR:
		case O_LTE:
			if ((rc = parse_u64("data prep", "--limit-*", optarg, &v)))
				return rc;
			*(c == O_LTR ? &po.limit_train : &po.limit_test) = (size_t)v;
			break;
		case O_OUT:
			out = optarg;
			break;
		case O_STORE:
			store_url = optarg;
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("data prep", "unknown option");
		}
	}
	if (optind < argc)
		return tf_cli_usage_error("data prep", "unexpected argument '%s'", argv[optind]);
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
		json_dumpf(doc, stdout, JSON_COMPACT);
		putchar('\n');
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

static const char train_usage[] =
    "usage: tpuflow train [options]\n"
    "Trains an MLP on an emulated TPU slice from a prepared dataset; checkpoints go under\n"
    "--ckpt (a rerun resumes from the newest one), the model bundle to --export.\n"
    "  --dataset KEY        manifest key (default " DEFAULT_DATASET ")\n"
    "  --store URL          object store (default: the state home's store)\n"
    "  --accelerator S      slice, e.g. v4-8 (default), v4-32, v5p-8, v5litepod-16\n"
    "  --threads N          host threads running the replicas (default: all cores)\n"
    "  --hidden LIST        hidden layer widths (default 256,128)\n"
    "  --binary             sigmoid binary cross-entropy (two-class data)\n"
    "  --epochs N           epochs (default 10)        --batch N  global batch (default 256)\n"
    "  --max-steps N        stop after N steps in total\n"
    "  --optimizer O        sgd (default), adam (AdamW with --weight-decay), lars\n"
    "  --lr F               base learning rate (default 0.1; adam 0.001)\n"
    "  --momentum F         sgd/lars momentum (default 0.9)\n"
    "  --weight-decay F     L2 (sgd), decoupled (adam), in the trust ratio (lars)\n"
    "  --lars-eta F         LARS trust coefficient (default 0.001)\n"
    "  --warmup-epochs F    linear warmup (default 0)\n"
    "  --schedule S         cosine, step or constant (default cosine)\n"
    "  --decay-epochs F     step schedule period (default a third of the run); x0.1 each\n"
    "  --clip-norm F        clip the gradient's global L2 norm\n"
    "  --linear-scaling     lr x batch / 256 (Goyal et al.)\n"
    "  --seed N             initialisation and data order (default 0)\n"
    "  --prefetch N         input batches prepared ahead (default 4; 0 turns it off)\n"
    "  --cache              keep decoded examples in memory after the first epoch\n"
    "  --ckpt PREFIX        checkpoint key prefix (default runs/local/train/ckpt/)\n"
    "  --no-ckpt            no checkpoints\n"
    "  --checkpoint-every N steps between checkpoints (default: only at the end)\n"
    "  --keep N             checkpoints kept (default 3)\n"
    "  --export DIR         write the model bundle to the local directory DIR\n"
    "  --export-key PREFIX  or under this key prefix of the store\n"
    "  --patience N         early stopping after N epochs without improvement\n"
    "  --monitor M          accuracy (default), loss or auc, on the test split\n"
    "  --log-every N        steps between progress lines (default 50)\n"
    "  --halt-after N       stop after step N as if killed (resume drills)\n"
    "  --home DIR, --json (JSON lines on stderr, the summary on stdout), --help\n";

int cmd_train(int argc, char **argv, struct tf_cli *cli)
{
	enum {
		O_DATASET = 1,
		O_STORE,
		O_ACCEL,
		O_THREADS,
		O_HIDDEN,
		O_BINARY,
		O_EPOCHS,
		O_BATCH,
		O_MAXSTEPS,
		O_OPT,
		O_LR,
		O_MOM,
		O_WD,
		O_ETA,
		O_WARM,
		O_SCHED,
		O_DECAY,
		O_CLIP,
		O_LSCALE,
		O_SEED,
		O_PREFETCH,
		O_CACHE,
		O_CKPT,
		O_NOCKPT,
		O_CKEVERY,
		O_KEEP,
		O_EXPORT,
		O_EXPORTKEY,
		O_PATIENCE,
		O_MONITOR,
		O_LOGEVERY,
		O_HALT
	};
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"dataset", required_argument, NULL, O_DATASET},
	    {"store", required_argument, NULL, O_STORE},
	    {"accelerator", required_argument, NULL, O_ACCEL},
	    {"threads", required_argument, NULL, O_THREADS},
	    {"hidden", required_argument, NULL, O_HIDDEN},
	    {"binary", no_argument, NULL, O_BINARY},
	    {"epochs", required_argument, NULL, O_EPOCHS},
	    {"batch", required_argument, NULL, O_BATCH},
	    {"max-steps", required_argument, NULL, O_MAXSTEPS},
	    {"optimizer", required_argument, NULL, O_OPT},
	    {"lr", required_argument, NULL, O_LR},
	    {"momentum", required_argument, NULL, O_MOM},
	    {"weight-decay", required_argument, NULL, O_WD},
	    {"lars-eta", required_argument, NULL, O_ETA},
	    {"warmup-epochs", required_argument, NULL, O_WARM},
	    {"schedule", required_argument, NULL, O_SCHED},
	    {"decay-epochs", required_argument, NULL, O_DECAY},
	    {"clip-norm", required_argument, NULL, O_CLIP},
	    {"linear-scaling", no_argument, NULL, O_LSCALE},
	    {"seed", required_argument, NULL, O_SEED},
	    {"prefetch", required_argument, NULL, O_PREFETCH},
	    {"cache", no_argument, NULL, O_CACHE},
	    {"ckpt", required_argument, NULL, O_CKPT},
	    {"no-ckpt", no_argument, NULL, O_NOCKPT},
	    {"checkpoint-every", required_argument, NULL, O_CKEVERY},
	    {"keep", required_argument, NULL, O_KEEP},
	    {"export", required_argument, NULL, O_EXPORT},
	    {"export-key", required_argument, NULL, O_EXPORTKEY},
	    {"patience", required_argument, NULL, O_PATIENCE},
	    {"monitor", required_argument, NULL, O_MONITOR},
	    {"log-every", required_argument, NULL, O_LOGEVERY},
	    {"halt-after", required_argument, NULL, O_HALT},
	    {0},
	};
	struct tf_train_opts o = {
	    .dataset = DEFAULT_DATASET, .ckpt_prefix = "runs/local/train/ckpt/", .prefetch = 4};
	o.optim.schedule = TF_LR_COSINE;
	const char *store_url = NULL, *export_dir = NULL;
	uint64_t v;
	int c, rc;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		rc = 0;
		switch (c) {
		case 'h':
			fputs(train_usage, stdout);
			return TF_EXIT_OK;
		case O_DATASET:
			o.dataset = optarg;
			break;
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
		case O_HIDDEN: {
			char *dup = tf_xstrdup(optarg), *save = NULL;
			o.nhidden = 0;
			for (char *t = strtok_r(dup, ",", &save); t;
			     t = strtok_r(NULL, ",", &save)) {
				if (o.nhidden == TF_MLP_MAX_LAYERS - 1 ||
				    parse_u64("train", "--hidden", t, &v) || v == 0) {
					free(dup);
					return tf_cli_usage_error("train",
					                          "--hidden wants up to %d "
					                          "positive widths like 256,128",
					                          TF_MLP_MAX_LAYERS - 1);
				}
				o.hidden[o.nhidden++] = (size_t)v;
			}
			free(dup);
			break;
		}
		case O_BINARY:
			o.binary = 1;
			break;
		case O_EPOCHS:
			rc = parse_u64("train", "--epochs", optarg, &o.epochs);
			break;
		case O_BATCH:
			rc = parse_u64("train", "--batch", optarg, &v);
			o.batch = (size_t)v;
			break;
		case O_MAXSTEPS:
			rc = parse_u64("train", "--max-steps", optarg, &o.max_steps);
			break;
		case O_OPT:
			if (tf_optim_kind_parse(optarg, &o.optim.kind))
				return tf_cli_usage_error("train",
				                          "unknown optimizer '%s'; use sgd, "
				                          "adam or lars",
				                          optarg);
			break;
		case O_LR:
			rc = parse_f("train", "--lr", optarg, &o.optim.lr);
			break;
		case O_MOM:
			rc = parse_f("train", "--momentum", optarg, &o.optim.momentum);
			break;
		case O_WD:
			rc = parse_f("train", "--weight-decay", optarg, &o.optim.weight_decay);
			break;
		case O_ETA:
			rc = parse_f("train", "--lars-eta", optarg, &o.optim.lars_eta);
			break;
		case O_WARM:
			rc = parse_f("train", "--warmup-epochs", optarg, &o.warmup_epochs);
			break;
		case O_SCHED:
			if (tf_lr_schedule_parse(optarg, &o.optim.schedule))
				return tf_cli_usage_error("train",
				                          "unknown schedule '%s'; use "
				                          "cosine, step or constant",
				                          optarg);
			break;
		case O_DECAY:
			rc = parse_f("train", "--decay-epochs", optarg, &o.decay_epochs);
			break;
		case O_CLIP:
			rc = parse_f("train", "--clip-norm", optarg, &o.optim.clip_norm);
			break;
		case O_LSCALE:
			o.optim.linear_scaling = 1;
			break;
		case O_SEED:
			rc = parse_u64("train", "--seed", optarg, &o.seed);
			break;
		case O_PREFETCH:
			rc = parse_u64("train", "--prefetch", optarg, &v);
			o.prefetch = (int)v;
			break;
		case O_CACHE:
			o.cache = 1;
			break;
		case O_CKPT:
			o.ckpt_prefix = optarg;
			break;
		case O_NOCKPT:
			o.ckpt_prefix = NULL;
			break;
		case O_CKEVERY:
			rc = parse_u64("train", "--checkpoint-every", optarg, &o.checkpoint_every);
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
		case O_PATIENCE:
			rc = parse_u64("train", "--patience", optarg, &v);
			o.patience = (int)v;
			break;
		case O_MONITOR:
			if (strcmp(optarg, "accuracy") && strcmp(optarg, "loss") &&
			    strcmp(optarg, "auc"))
				return tf_cli_usage_error("train", "--monitor is accuracy, loss or "
				                                   "auc");
			o.monitor = optarg;
			break;
		case O_LOGEVERY:
			rc = parse_u64("train", "--log-every", optarg, &o.log_every);
			break;
		case O_HALT:
			rc = parse_u64("train", "--halt-after", optarg, &o.halt_after);
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("train", "unknown option");
		}
		if (rc)
			return rc;
	}
	if (optind < argc)
		return tf_cli_usage_error("train", "unexpected argument '%s'", argv[optind]);
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
		json_dumpf(doc, stdout, JSON_COMPACT);
		putchar('\n');
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

static const char eval_usage[] =
    "usage: tpuflow eval --model DIR [options]\n"
    "Evaluates an exported model bundle on the test split of a dataset, on an emulated slice.\n"
    "  --model DIR          bundle directory (or --model-key PREFIX in the store)\n"
    "  --dataset KEY        manifest key (default " DEFAULT_DATASET ")\n"
    "  --store URL          object store (default: the state home's store)\n"
    "  --accelerator S      slice (default v4-8)\n"
    "  --home DIR, --json, --help\n";

int cmd_eval(int argc, char **argv, struct tf_cli *cli)
{
	enum { O_MODEL = 1, O_MODELKEY, O_DATASET, O_STORE, O_ACCEL };
	static const struct option opts[] = {
	    TF_CLI_COMMON_OPTIONS,
	    {"model", required_argument, NULL, O_MODEL},
	    {"model-key", required_argument, NULL, O_MODELKEY},
	    {"dataset", required_argument, NULL, O_DATASET},
	    {"store", required_argument, NULL, O_STORE},
	    {"accelerator", required_argument, NULL, O_ACCEL},
	    {0},
	};
	const char *model = NULL, *model_key = NULL, *dataset = DEFAULT_DATASET, *store_url = NULL;
	const char *accel = "v4-8";
	int c, rc;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			fputs(eval_usage, stdout);
			return TF_EXIT_OK;
		case O_MODEL:
			model = optarg;
			break;
		case O_MODELKEY:
			model_key = optarg;
			break;
		case O_DATASET:
			dataset = optarg;
			break;
		case O_STORE:
			store_url = optarg;
			break;
		case O_ACCEL:
			accel = optarg;
			break;
		default:
			if (!tf_cli_common_option(cli, c, optarg))
				return tf_cli_usage_error("eval", "unknown option");
		}
	}
	if (!model == !model_key)
		return tf_cli_usage_error("eval", "give one of --model DIR or --model-key PREFIX");
	struct tf_objstore *s = NULL, *ms = NULL;
	struct tf_bundle *b = NULL;
	struct tf_eval_result ev;
	char err[1024];
	if ((rc = open_store("eval", store_url, cli, &s)))
		return rc;
	if ((model && (rc = tf_objstore_open(model, &ms, err, sizeof err))) ||
	    (rc = tf_bundle_load(ms ? ms : s, ms ? "" : model_key, &b, err, sizeof err)) ||
	    (rc = tf_bundle_evaluate(s, b, dataset, accel, &ev, err, sizeof err)))
		goto fail;
	if (cli->json)
		printf("{\"examples\":%zu,\"loss\":%.17g,\"accuracy\":%.17g,\"auc\":%.17g}\n", ev.n,
		       ev.loss, ev.accuracy, isnan(ev.auc) ? 0.0 : ev.auc);
	else
		printf("%zu examples: accuracy %.4f, loss %.4f, AUC %.4f\n", ev.n, ev.accuracy,
		       ev.loss, ev.auc);
	rc = TF_EXIT_OK;
	goto out;
fail:
	fprintf(stderr, "tpuflow eval: %s\n", err);
	rc = exit_for(rc);
out:
	tf_bundle_free(b);
	tf_objstore_free(ms);
	tf_objstore_free(s);
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
		json_dumpf(doc, stdout, JSON_COMPACT);
		putchar('\n');
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
