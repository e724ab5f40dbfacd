/* layersim.h — a SCALE-Sim-compatible layer simulator: the systolic array's compute and its
 * memory system (double-buffered ifmap/filter/ofmap SRAMs in front of DRAM/HBM), per layer.
 *
 * It follows the semantics of SCALE-Sim v2 (scalesim/compute/systolic_compute_{ws,os,is}.py,
 * scalesim/memory/{read_buffer,read_buffer_estimate_bw,write_buffer}.py) and reproduces its
 * COMPUTE_REPORT, BANDWIDTH_REPORT and DETAILED_ACCESS_REPORT figures: total and stall cycles,
 * utilization, mapping efficiency, per-fold compute utilization, SRAM and DRAM access counts
 * and their first/last cycles, average bandwidths. Inputs are SCALE-Sim's topology CSV (conv
 * layers or M,N,K GEMMs) and its .cfg. Instead of building address matrices it generates each
 * cycle's demand on the fly, so a whole network takes milliseconds (docs/accel.md "Memory
 * model"). */
#ifndef TF_LAYERSIM_H
#define TF_LAYERSIM_H

#include <stddef.h>
#include <stdint.h>

#include "accel/mxu.h"

/* A layer as SCALE-Sim describes it: a convolution (a GEMM is H = M, W = K, filter 1 x K,
 * 1 channel, N filters, stride 1). */
struct tf_layer {
	char name[64];
	uint32_t ifmap_h, ifmap_w;   /* input height, width */
	uint32_t filt_h, filt_w;     /* filter height, width (<= the input's) */
	uint32_t channels, filters;  /* input channels, filters (output channels) */
	uint32_t stride_h, stride_w; /* strides (>= 1) */
};

/* M x K . K x N as SCALE-Sim's GEMM layer. */
void tf_layer_gemm(struct tf_layer *l, const char *name, uint32_t M, uint32_t N, uint32_t K);
/* The layer as a GEMM: M = output pixels, N = filters, K = filter window (h x w x channels).
 * -EOVERFLOW (K then UINT64_MAX) when the window has 2^64 elements or more, else 0. */
int tf_layer_mnk(const struct tf_layer *l, uint64_t *M, uint64_t *N, uint64_t *K);

struct tf_layersim_cfg {
	char run_name[64];
	int rows, cols;                         /* ArrayHeight, ArrayWidth */
	int dataflow;                           /* TF_MXU_WS, TF_MXU_OS or TF_MXU_IS */
	uint32_t ifmap_kb, filter_kb, ofmap_kb; /* SRAM sizes in KiB of 1-byte words */
	int user_bandwidth;                     /* 1: USER (bandwidth words/cycle), 0: CALC */
	uint32_t bandwidth;                     /* words per cycle (USER mode) */
};

/* Defaults, also for the keys a .cfg leaves out: 128x128, ws, 1024/1024/512 KiB SRAMs, CALC
 * (bandwidth 10, which the reader never uses: USER needs an explicit Bandwidth). */
void tf_layersim_cfg_init(struct tf_layersim_cfg *cfg);

/* One operand's memory figures (ifmap, filter: reads; ofmap: writes). */
struct tf_layersim_mem {
	int64_t sram_start, sram_stop; /* first / last cycle the SRAM is accessed */
	uint64_t sram_accesses;
	int64_t dram_start, dram_stop; /* first / last cycle of the DRAM transfers */
	uint64_t dram_accesses;        /* words moved to or from DRAM */
	double sram_bw, dram_bw;       /* average words per cycle, as SCALE-Sim divides them */
};

struct tf_layersim_report {
	uint64_t total_cycles;   /* SCALE-Sim's "Total Cycles" (with stalls) */
	uint64_t stall_cycles;   /* cycles the array waited for memory */
	uint64_t compute_cycles; /* the stall-free demand rows: folds x cycles per fold */
	uint64_t folds;
	double overall_util;       /* % : M*N*K / (total_cycles * R * C) */
	double mapping_efficiency; /* % : mean over folds of used PEs / R*C */
	double compute_util;       /* % : mean over folds of MACs / (R*C * fold cycles) */
	struct tf_layersim_mem ifmap, filter, ofmap;
	uint64_t wdb_cycles; /* ws with weight double-buffering: R + folds*(R+C+T-2) */
};

/* Simulates one layer. Returns 0, -EINVAL (bad layer or configuration, message in err) or
 * -ENOMEM (a layer too large to index: more than 2^31 words in one operand). */
int tf_layersim_run(const struct tf_layersim_cfg *cfg, const struct tf_layer *layer,
                    struct tf_layersim_report *out, char *err, size_t errlen);

/* Reads a SCALE-Sim topology CSV: conv rows "name, H, W, Fh, Fw, C, N, stride[, stride_w]," or,
 * with gemm (or a header naming M, N, K), "name, M, N, K,". As SCALE-Sim, the field after the
 * last comma is ignored, and a conv layer whose name contains "DP" (depthwise) becomes one
 * layer per channel. On success *layers (caller frees) holds *n layers. 0 or -errno with a
 * message naming the file and line. */
int tf_layersim_read_topology(const char *path, int gemm, struct tf_layer **layers, size_t *n,
                              char *err, size_t errlen);

/* Reads a SCALE-Sim .cfg ([general] run_name, [architecture_presets] ArrayHeight, ArrayWidth,
 * IfmapSramSzkB, FilterSramSzkB, OfmapSramSzkB, Dataflow, Bandwidth, [run_presets]
 * InterfaceBandwidth USER|CALC). 0 or -errno with a message. */
int tf_layersim_read_cfg(const char *path, struct tf_layersim_cfg *cfg, char *err, size_t errlen);

#endif
