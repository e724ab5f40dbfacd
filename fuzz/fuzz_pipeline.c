/* fuzz_pipeline.c — libFuzzer target for the pipeline loader, the `when` language and the
 * templates: any input must be accepted or refused with diagnostics, never crash, leak or
 * take long. Built and run by `make fuzz` against the whole library (not part of
 * `make test`); by hand: build-fuzz/fuzz_pipeline -max_len=65536 -runs=1000000 pipelines/
 */
#include "orchestrator/pipeline.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static json_t *no_values(void *ctx, const struct tf_ref *r)
{
	(void)ctx;
	(void)r;
	return json_integer(1); /* every reference resolves to 1: exercises evaluation */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tf_diag_list d;
	struct tf_pipeline *p = NULL;
	tf_diag_list_init(&d);
	/* the whole input as a pipeline file */
	if (!tf_pipeline_load_buffer("fuzz.yaml", (const char *)data, size, NULL, 0,
	                             TF_PIPELINE_ALLOW_UNSET, &p, &d)) {
		char err[256];
		for (size_t i = 0; i < p->nsteps; i++) {
			int go;
			if (p->steps[i].when)
				tf_expr_eval_bool(p->steps[i].when, no_values, NULL, &go, err,
				                  sizeof(err));
			json_t *w =
			    tf_step_render_with(&p->steps[i], no_values, NULL, err, sizeof(err));
			json_decref(w);
		}
		json_decref(tf_pipeline_plan_json(p));
		tf_pipeline_free(p);
	}
	tf_diag_list_release(&d);

	/* the same bytes as a `when` expression and as a template */
	char *s = malloc(size + 1);
	memcpy(s, data, size);
	s[size] = '\0';
	tf_diag_list_init(&d);
	struct tf_expr *e = tf_expr_parse(s, "fuzz", 1, 1, 1, &d);
	if (e && !tf_expr_check(e, NULL, NULL, "fuzz", &d)) {
		struct tf_value v;
		char err[256];
		if (!tf_expr_eval(e, no_values, NULL, &v, err, sizeof(err)))
			tf_value_release(&v);
	}
	tf_expr_free(e);
	struct tf_template t;
	tf_template_parse(s, "fuzz", 1, 1, 1, &t, &d);
	char err[256];
	free(tf_template_render(&t, no_values, NULL, err, sizeof(err)));
	tf_template_release(&t);
	tf_diag_list_release(&d);
	free(s);
	return 0;
}
