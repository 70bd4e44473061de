/*
 * leak.c: opens and closes a DAT IA N times in one process (each cycle
 * loads, initialises and finalises the provider through libdat2, as a
 * short-lived uDAPL program does) and prints the resident set size every
 * STEP cycles, as "cycle rss_kib".
 *
 * usage: leak <ia name> <cycles> <step>
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <dat2/udat.h>

static long rss_kib(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f == NULL)
		return -1;
	if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv)
{
	int i, n, step;

	if (argc != 4) {
		fprintf(stderr, "usage: %s <ia name> <cycles> <step>\n", argv[0]);
		return 2;
	}
	n = atoi(argv[2]);
	step = atoi(argv[3]);
	for (i = 1; i <= n; i++) {
		DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
		DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
		DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
		DAT_RETURN r;

		r = dat_ia_open(argv[1], 8, &async, &ia);
		if (r != DAT_SUCCESS) {
			fprintf(stderr, "cycle %d: dat_ia_open: 0x%x\n", i, r);
			return 1;
		}
		/* an object left for the close to destroy */
		r = dat_pz_create(ia, &pz);
		if (r != DAT_SUCCESS) {
			fprintf(stderr, "cycle %d: dat_pz_create: 0x%x\n", i, r);
			return 1;
		}
		r = dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
		if (r != DAT_SUCCESS) {
			fprintf(stderr, "cycle %d: dat_ia_close: 0x%x\n", i, r);
			return 1;
		}
		if (i % step == 0)
			printf("%d %ld\n", i, rss_kib());
	}
	return 0;
}
