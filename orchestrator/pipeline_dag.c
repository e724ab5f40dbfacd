/* pipeline_dag.c — the steps as a graph: `needs` resolved to indexes (with "did you mean"),
 * cycles reported with their path, and the levels and order the plan and the engine use.
 */
#include "orchestrator/pipeline_int.h"

#include "common/common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int tf_pl_cmp_nameidx(const void *a, const void *b)
{
	const struct nameidx *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

int tf_pl_step_lookup(const struct loader *L, const char *name)
{
	size_t lo = 0, hi = L->nsidx;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(L->sidx[mid].name, name);
		if (!c)
			return (int)L->sidx[mid].idx;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* The step name nearest to `word`, other than step `self`. */
const char *tf_pl_suggest_step(const struct loader *L, const char *word, size_t self)
{
	const struct tf_pipeline *p = L->p;
	const char **names = tf_xcalloc(p->nsteps + 1, sizeof(*names));
	size_t nn = 0;
	for (size_t i = 0; i < p->nsteps; i++)
		if (p->steps[i].name && i != self)
			names[nn++] = p->steps[i].name;
	const char *near = tf_diag_suggest(word, names);
	free(names);
	return near;
}

void tf_pl_resolve_needs(struct loader *L, size_t idx, const struct ynode *needs)
{
	struct tf_pipeline *p = L->p;
	struct tf_step *s = &p->steps[idx];
	struct stepx *x = &L->sx[idx];
	const struct ynode *const *items = NULL;
	size_t n = 0;
	if (needs->kind == Y_SCALAR) { /* `needs: prep` is a one-item list */
		items = &needs;
		n = 1;
	} else if (!tf_pl_want_kind(L, needs, Y_SEQ, "'needs'")) {
		items = (const struct ynode *const *)needs->kids;
		n = needs->n;
	}
	s->needs = tf_xcalloc(n + 1, sizeof(size_t));
	x->need_nodes = tf_xcalloc(n + 1, sizeof(*x->need_nodes));
	for (size_t i = 0; i < n; i++) {
		const struct ynode *it = items[i];
		if (tf_pl_want_kind(L, it, Y_SCALAR, "an item of 'needs'")) {
			L->dag_ok = 0;
			continue;
		}
		int j = tf_pl_step_lookup(L, it->str);
		if (j < 0) {
			const char *near =
			    tf_pl_diag_room(L) ? tf_pl_suggest_step(L, it->str, idx) : NULL;
			char hint[128];
			if (near)
				snprintf(hint, sizeof(hint), "did you mean '%s'?", near);
			else
				snprintf(hint, sizeof(hint), "'needs' lists names of other steps");
			tf_pl_err_at(L, it, hint, "step '%s' needs unknown step '%.60s'", s->name,
			             it->str);
			L->dag_ok = 0;
			continue;
		}
		if (!s->final && p->steps[j].final) {
			tf_pl_err_at(L, it, "finally steps run after every other step; move it to "
			                    "'steps' or drop the need",
			             "step '%s' needs '%s', a finally step", s->name, it->str);
			L->dag_ok = 0;
			continue;
		}
		int dup = 0;
		for (size_t k = 0; k < s->nneeds; k++)
			if (s->needs[k] == (size_t)j)
				dup = 1;
		if (dup) {
			tf_pl_err_at(L, it, "remove the repeated entry",
			             "step '%s' needs '%s' twice", s->name, it->str);
			continue;
		}
		x->need_nodes[s->nneeds] = it;
		s->needs[s->nneeds++] = (size_t)j;
	}
}

/* Cycle search: iterative DFS (no recursion on hostile input) with colours; each back edge
 * found is reported once with the cycle spelled out. */
void tf_pl_find_cycles(struct loader *L)
{
	struct tf_pipeline *p = L->p;
	size_t n = p->nsteps;
	unsigned char *color = tf_xcalloc(n + 1, 1); /* 0 new, 1 on stack, 2 done */
	size_t *stack = tf_xcalloc(n + 1, sizeof(size_t));
	size_t *edge = tf_xcalloc(n + 1, sizeof(size_t));
	for (size_t root = 0; root < n; root++) {
		if (color[root])
			continue;
		size_t sp = 0;
		stack[sp] = root;
		edge[sp] = 0;
		color[root] = 1;
		sp++;
		while (sp) {
			size_t u = stack[sp - 1];
			if (edge[sp - 1] >= p->steps[u].nneeds) {
				color[u] = 2;
				sp--;
				continue;
			}
			size_t ei = edge[sp - 1]++;
			size_t v = p->steps[u].needs[ei];
			if (color[v] == 0) {
				color[v] = 1;
				stack[sp] = v;
				edge[sp] = 0;
				sp++;
			} else if (color[v] == 1 && !tf_pl_diag_room(L)) {
				L->dag_ok = 0;
			} else if (color[v] == 1) {
				/* stack holds v ... u; u needs v: the cycle runs v -> ... -> u -> v
				 * in "needs" direction; print it in run order starting at v */
				size_t first = sp;
				while (first > 0 && stack[first - 1] != v)
					first--;
				first--;
				size_t cap = 64;
				char *buf = tf_xmalloc(cap);
				size_t len = 0;
				buf[0] = '\0';
				for (size_t k = sp; k-- > first;) {
					if (sp - first > 12 && k < sp - 6 && k > first + 4) {
						if (k ==
						    sp -
						        7) { /* long cycles: the ends and a count */
							char mid[48];
							int w = snprintf(mid, sizeof(mid),
							                 "... (%zu more) -> ",
							                 sp - first - 11);
							if (len + (size_t)w + 1 > cap) {
								cap = (len + (size_t)w + 1) * 2;
								buf = tf_xrealloc(buf, cap);
							}
							memcpy(buf + len, mid, (size_t)w + 1);
							len += (size_t)w;
						}
						continue;
					}
					const char *nm = p->steps[stack[k]].name;
					size_t need = len + strlen(nm) + 5;
					if (need > cap) {
						cap = need * 2;
						buf = tf_xrealloc(buf, cap);
					}
					len += (size_t)sprintf(buf + len, "%s -> ", nm);
				}
				const char *nm = p->steps[u].name;
				if (len + strlen(nm) + 1 > cap)
					buf = tf_xrealloc(buf, len + strlen(nm) + 1);
				strcpy(buf + len, nm);
				tf_pl_err_at(
				    L, L->sx[u].need_nodes[ei],
				    "a step cannot depend on itself, directly or through others; "
				    "remove one of these needs",
				    "dependency cycle: %s", buf);
				free(buf);
				L->dag_ok = 0;
			}
		}
	}
	free(color);
	free(stack);
	free(edge);
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	return (x > y) - (x < y);
}

/* Levels, topological order and transitive upstream sets (only for a sound DAG). */
void tf_pl_compute_order(struct loader *L)
{
	struct tf_pipeline *p = L->p;
	size_t n = p->nsteps;
	/* Kahn's algorithm by levels: a step's level is 1 + the highest level of its needs. */
	size_t *indeg = tf_xcalloc(n + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		indeg[i] = p->steps[i].nneeds;
	size_t *order = tf_xcalloc(n + 1, sizeof(size_t));
	size_t done = 0;
	int level = 0;
	/* dependents lists */
	size_t *cnt = tf_xcalloc(n + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < p->steps[i].nneeds; k++)
			cnt[p->steps[i].needs[k]]++;
	size_t **deps = tf_xcalloc(n + 1, sizeof(size_t *));
	size_t *fill = tf_xcalloc(n + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		deps[i] = tf_xcalloc(cnt[i] + 1, sizeof(size_t));
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < p->steps[i].nneeds; k++) {
			size_t j = p->steps[i].needs[k];
			deps[j][fill[j]++] = i;
		}
	size_t lvl_start = 0;
	for (size_t i = 0; i < n; i++)
		if (!indeg[i]) {
			p->steps[i].level = 0;
			order[done++] = i;
		}
	while (lvl_start < done) {
		size_t lvl_end = done;
		for (size_t a = lvl_start; a < lvl_end; a++) {
			size_t u = order[a];
			for (size_t k = 0; k < cnt[u]; k++) {
				size_t v = deps[u][k];
				if (--indeg[v] == 0) {
					p->steps[v].level = level + 1;
					order[done++] = v;
				}
			}
		}
		/* keep file order within a level */
		qsort(order + lvl_end, done - lvl_end, sizeof(size_t), cmp_size);
		lvl_start = lvl_end;
		if (lvl_start < done)
			level++;
	}
	p->topo = order;
	p->nlevels = n ? level + 1 : 0;
	L->words = (n + 63) / 64;
	L->upstream = tf_xcalloc(n * L->words + 1, sizeof(uint64_t));
	for (size_t a = 0; a < n; a++) {
		size_t u = order[a];
		uint64_t *up = L->upstream + u * L->words;
		for (size_t k = 0; k < p->steps[u].nneeds; k++) {
			size_t j = p->steps[u].needs[k];
			const uint64_t *uj = L->upstream + j * L->words;
			for (size_t w = 0; w < L->words; w++)
				up[w] |= uj[w];
			up[j / 64] |= 1ull << (j % 64);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(deps[i]);
	free(deps);
	free(fill);
	free(cnt);
	free(indeg);
}

int tf_pl_is_upstream(const struct loader *L, size_t step, size_t of)
{
	return (L->upstream[step * L->words + of / 64] >> (of % 64)) & 1;
}
