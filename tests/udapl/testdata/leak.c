/*
 * leak.c: opens and closes a DAT IA N times in one process. Each cycle
 * loads, initialises and finalises the provider through libdat2 (as a
 * short-lived uDAPL program does), creates K each of PZs, LMRs, EVDs, CNOs
 * and EPs, frees half of them and leaves the rest for the abrupt close to
 * destroy, and the resident set size is printed every STEP cycles as
 * "cycle rss_kib".
 *
 * usage: leak <ia name> <cycles> <step> <objects per cycle>
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <dat2/udat.h>

#define MAXK 64

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

#define CHECK(call, what)                                                     \
	do {                                                                  \
		DAT_RETURN r_ = (call);                                       \
		if (r_ != DAT_SUCCESS) {                                      \
			fprintf(stderr, "cycle %d: %s: 0x%x\n", i, what, r_); \
			return 1;                                             \
		}                                                             \
	} while (0)

int main(int argc, char **argv)
{
	static char buf[MAXK][4096];
	int i, j, n, step, k;

	if (argc != 5) {
		fprintf(stderr, "usage: %s <ia name> <cycles> <step> <objects per cycle>\n", argv[0]);
		return 2;
	}
	n = atoi(argv[2]);
	step = atoi(argv[3]);
	k = atoi(argv[4]);
	if (k < 1 || k > MAXK || step < 1) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	for (i = 1; i <= n; i++) {
		DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
		DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
		DAT_PZ_HANDLE pz[MAXK];
		DAT_LMR_HANDLE lmr[MAXK];
		DAT_EVD_HANDLE evd[MAXK];
		DAT_CNO_HANDLE cno[MAXK];
		DAT_EP_HANDLE ep[MAXK];

		CHECK(dat_ia_open(argv[1], 8, &async, &ia), "dat_ia_open");
		for (j = 0; j < k; j++) {
			DAT_REGION_DESCRIPTION region;
			DAT_LMR_CONTEXT lctx;
			DAT_RMR_CONTEXT rctx;
			DAT_VLEN len;
			DAT_VADDR addr;

			CHECK(dat_pz_create(ia, &pz[j]), "dat_pz_create");
			region.for_va = buf[j];
			CHECK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(buf[j]), pz[j],
					     DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr[j], &lctx, &rctx, &len, &addr),
			      "dat_lmr_create");
			CHECK(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno[j]), "dat_cno_create");
			CHECK(dat_evd_create(ia, 16, cno[j], DAT_EVD_DTO_FLAG | DAT_EVD_CONNECTION_FLAG, &evd[j]),
			      "dat_evd_create");
			CHECK(dat_ep_create(ia, pz[j], evd[j], evd[j], evd[j], NULL, &ep[j]), "dat_ep_create");
		}
		/* free the first half explicitly, leave the rest to dat_ia_close */
		for (j = 0; j < k / 2; j++) {
			CHECK(dat_ep_free(ep[j]), "dat_ep_free");
			CHECK(dat_evd_free(evd[j]), "dat_evd_free");
			CHECK(dat_cno_free(cno[j]), "dat_cno_free");
			CHECK(dat_lmr_free(lmr[j]), "dat_lmr_free");
			CHECK(dat_pz_free(pz[j]), "dat_pz_free");
		}
		CHECK(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), "dat_ia_close");
		if (i % step == 0)
			printf("%d %ld\n", i, rss_kib());
	}
	return 0;
}
