/* fuzz_npy.c — libFuzzer target for the .npy reader (`tpuflow predict --input`, `accel
 * matmul`): any file is read or refused with a message, never a crash or a huge allocation
 * from a lying header. `make fuzz` builds and runs it. */
#include "ml/npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/tpuflow-fuzz-npy.%d", (int)getpid());
	FILE *f = fopen(path, "wb");
	if (!f)
		return 0;
	fwrite(data, 1, size, f);
	fclose(f);
	struct tf_npy a;
	char err[256];
	if (tf_npy_read(path, &a, err, sizeof(err)) == 0)
		tf_npy_release(&a);
	return 0;
}
