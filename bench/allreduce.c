/* The wire's own all-reduce latency, beside which bench/hosts-bench.sh
 * puts weft's (`weft bench allreduce --comm mpi`): MPI_Allreduce of float32
 * MPI_SUM, 4 KiB to 64 MiB, timed as weft times its own (one warm-up call,
 * then the mean over calls), rank 0 printing one JSON line per size (×4):
 *   {"bytes": 4096, "us": 17.5}
 * Built by the bench with mpicc; no binary is kept. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* reps gives each size about 0.2 s of calls at 1 GB/s, and at least 5. */
static int reps(long bytes) {
	long n = 200000000L / bytes;
	return n < 5 ? 5 : n > 2000 ? 2000 : (int)n;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	for (long bytes = 4096; bytes <= 64L << 20; bytes *= 4) {
		float *buf = calloc(bytes / 4, 4);
		int n = reps(bytes);
		MPI_Allreduce(MPI_IN_PLACE, buf, bytes / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		MPI_Barrier(MPI_COMM_WORLD);
		double start = MPI_Wtime();
		for (int i = 0; i < n; i++)
			MPI_Allreduce(MPI_IN_PLACE, buf, bytes / 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		double us = (MPI_Wtime() - start) / n * 1e6;
		if (rank == 0)
			printf("{\"bytes\": %ld, \"us\": %.1f}\n", bytes, us);
		free(buf);
	}
	MPI_Finalize();
	return 0;
}
