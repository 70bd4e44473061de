//go:build udapl

/*
 * provider.c: the struct dat_provider function table of the softrnic uDAPL
 * provider and the thin C entry points behind it.
 *
 * Each entry has exactly the prototype of its udat_redirection.h /
 * dat_redirection.h typedef and forwards to a Go function (exported from
 * the Go files of this package, see _cgo_export.h) with plain arguments:
 * unions passed by value (DAT_DTO_COOKIE, DAT_REGION_DESCRIPTION,
 * DAT_OS_WAIT_PROXY_AGENT) and the va_list of the extension entry are
 * unpacked here, because Go cannot take them.
 */
#define _GNU_SOURCE /* dladdr */
#include "provider.h"
#include "_cgo_export.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdarg.h>

/* ---- registration: called by libdat2 after dlopen ---------------------- */

/*
 * sr_pin makes the library undeletable: a Go runtime, started when the
 * library was loaded, cannot be unloaded, but libdat2 dlcloses a provider
 * library when the last IA of its dat.conf entry closes. Reopening the
 * loaded library with RTLD_NOLOAD | RTLD_NODELETE (glibc) marks it as if it
 * had been linked with -z nodelete, so the build needs no linker flags.
 */
static void sr_pin(void)
{
	static int pinned;
	Dl_info di;

	if (pinned)
		return;
	if (dladdr((void *)sr_pin, &di) != 0 && di.dli_fname != NULL &&
	    dlopen(di.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE) != NULL)
		pinned = 1;
}

void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *ia_params)
{
	sr_pin();
	srProviderInit((DAT_PROVIDER_INFO *)info, (char *)ia_params);
}

void dat_provider_fini(const DAT_PROVIDER_INFO *info)
{
	srProviderFini((DAT_PROVIDER_INFO *)info);
}

/* ---- handle helpers that need no Go ------------------------------------ */

static struct sr_handle *sr_live(DAT_HANDLE h)
{
	struct sr_handle *s = (struct sr_handle *)h;

	if (s == NULL || s->magic != SR_MAGIC)
		return NULL;
	return s;
}

static DAT_RETURN sr_set_consumer_context(DAT_HANDLE h, DAT_CONTEXT c)
{
	struct sr_handle *s = sr_live(h);

	if (s == NULL)
		return DAT_ERROR(DAT_INVALID_HANDLE, 0);
	s->context = c;
	return DAT_SUCCESS;
}

static DAT_RETURN sr_get_consumer_context(DAT_HANDLE h, DAT_CONTEXT *c)
{
	struct sr_handle *s = sr_live(h);

	if (s == NULL)
		return DAT_ERROR(DAT_INVALID_HANDLE, 0);
	if (c == NULL)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	*c = s->context;
	return DAT_SUCCESS;
}

static DAT_RETURN sr_get_handle_type(DAT_HANDLE h, DAT_HANDLE_TYPE *t)
{
	struct sr_handle *s = sr_live(h);

	if (s == NULL)
		return DAT_ERROR(DAT_INVALID_HANDLE, 0);
	if (t == NULL)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	*t = (DAT_HANDLE_TYPE)s->type;
	return DAT_SUCCESS;
}

void sr_set_merging(DAT_PROVIDER_ATTR *a, DAT_BOOLEAN v)
{
	DAT_BOOLEAN *m = (DAT_BOOLEAN *)&a->evd_stream_merging_supported[0][0];
	int i;

	for (i = 0; i < 36; i++)
		m[i] = v;
}

void sr_call_agent(DAT_AGENT_FUNC f, DAT_PVOID instance, DAT_EVD_HANDLE evd)
{
	if (f != NULL)
		f(instance, evd);
}

DAT_NAMED_ATTR sr_provider_attrs[SR_NUM_PROVIDER_ATTRS] = {
	{"DAT_IB_PROVIDER_NAME", "softrnic"},
	{"DAT_IB_RDMA_READ", "TRUE"},
	{"DAT_EXTENSION_INTERFACE", "TRUE"},
	{DAT_IB_ATTR_FETCH_AND_ADD, "TRUE"},
	{DAT_IB_ATTR_CMP_AND_SWAP, "TRUE"},
	{DAT_IB_ATTR_IMMED_DATA, "TRUE"},
};

/* ---- IA ------------------------------------------------------------------ */

static DAT_RETURN sr_ia_open(const DAT_NAME_PTR name, DAT_COUNT qlen, DAT_EVD_HANDLE *async_evd, DAT_IA_HANDLE *ia)
{
	return srIAOpen((char *)name, qlen, async_evd, ia);
}

static DAT_RETURN sr_ia_query(DAT_IA_HANDLE ia, DAT_EVD_HANDLE *async_evd, DAT_IA_ATTR_MASK ia_mask,
			      DAT_IA_ATTR *ia_attr, DAT_PROVIDER_ATTR_MASK pr_mask, DAT_PROVIDER_ATTR *pr_attr)
{
	return srIAQuery(ia, async_evd, ia_mask, ia_attr, pr_mask, pr_attr);
}

static DAT_RETURN sr_ia_close(DAT_IA_HANDLE ia, DAT_CLOSE_FLAGS flags)
{
	return srIAClose(ia, (uint32_t)flags);
}

static DAT_RETURN sr_ia_ha_related(DAT_IA_HANDLE ia, const DAT_NAME_PTR name, DAT_BOOLEAN *answer)
{
	return srIAHARelated(ia, (char *)name, answer);
}

/* ---- CNO ----------------------------------------------------------------- */

static DAT_RETURN sr_cno_create(DAT_IA_HANDLE ia, DAT_OS_WAIT_PROXY_AGENT agent, DAT_CNO_HANDLE *cno)
{
	return srCNOCreate(ia, agent.instance_data, (void *)agent.proxy_agent_func, cno);
}

static DAT_RETURN sr_cno_fd_create(DAT_IA_HANDLE ia, DAT_FD *fd, DAT_CNO_HANDLE *cno)
{
	return srCNOFDCreate(ia, fd, cno);
}

static DAT_RETURN sr_cno_modify_agent(DAT_CNO_HANDLE cno, DAT_OS_WAIT_PROXY_AGENT agent)
{
	return srCNOModifyAgent(cno, agent.instance_data, (void *)agent.proxy_agent_func);
}

static DAT_RETURN sr_cno_query(DAT_CNO_HANDLE cno, DAT_CNO_PARAM_MASK mask, DAT_CNO_PARAM *param)
{
	return srCNOQuery(cno, (uint32_t)mask, param);
}

static DAT_RETURN sr_cno_free(DAT_CNO_HANDLE cno)
{
	return srCNOFree(cno);
}

static DAT_RETURN sr_cno_wait(DAT_CNO_HANDLE cno, DAT_TIMEOUT timeout, DAT_EVD_HANDLE *evd)
{
	return srCNOWait(cno, timeout, evd);
}

static DAT_RETURN sr_cno_trigger(DAT_CNO_HANDLE cno, DAT_EVD_HANDLE *evd)
{
	return srCNOTrigger(cno, evd);
}

/* ---- CR ------------------------------------------------------------------ */

static DAT_RETURN sr_cr_query(DAT_CR_HANDLE cr, DAT_CR_PARAM_MASK mask, DAT_CR_PARAM *param)
{
	return srCRQuery(cr, (uint32_t)mask, param);
}

static DAT_RETURN sr_cr_accept(DAT_CR_HANDLE cr, DAT_EP_HANDLE ep, DAT_COUNT size, const DAT_PVOID pdata)
{
	return srCRAccept(cr, ep, size, pdata);
}

static DAT_RETURN sr_cr_reject(DAT_CR_HANDLE cr, DAT_COUNT size, const DAT_PVOID pdata)
{
	return srCRReject(cr, size, pdata);
}

static DAT_RETURN sr_cr_handoff(DAT_CR_HANDLE cr, DAT_CONN_QUAL qual)
{
	return srCRHandoff(cr, qual);
}

/* ---- EVD ----------------------------------------------------------------- */

static DAT_RETURN sr_evd_create(DAT_IA_HANDLE ia, DAT_COUNT qlen, DAT_CNO_HANDLE cno, DAT_EVD_FLAGS flags, DAT_EVD_HANDLE *evd)
{
	return srEVDCreate(ia, qlen, cno, (uint32_t)flags, evd);
}

static DAT_RETURN sr_evd_query(DAT_EVD_HANDLE evd, DAT_EVD_PARAM_MASK mask, DAT_EVD_PARAM *param)
{
	return srEVDQuery(evd, (uint32_t)mask, param);
}

static DAT_RETURN sr_evd_modify_cno(DAT_EVD_HANDLE evd, DAT_CNO_HANDLE cno)
{
	return srEVDModifyCNO(evd, cno);
}

static DAT_RETURN sr_evd_enable(DAT_EVD_HANDLE evd)
{
	return srEVDEnable(evd, 1);
}

static DAT_RETURN sr_evd_disable(DAT_EVD_HANDLE evd)
{
	return srEVDEnable(evd, 0);
}

static DAT_RETURN sr_evd_set_unwaitable(DAT_EVD_HANDLE evd)
{
	return srEVDUnwaitable(evd, 1);
}

static DAT_RETURN sr_evd_clear_unwaitable(DAT_EVD_HANDLE evd)
{
	return srEVDUnwaitable(evd, 0);
}

static DAT_RETURN sr_evd_wait(DAT_EVD_HANDLE evd, DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT *event, DAT_COUNT *nmore)
{
	return srEVDWait(evd, timeout, threshold, event, nmore);
}

static DAT_RETURN sr_evd_resize(DAT_EVD_HANDLE evd, DAT_COUNT qlen)
{
	return srEVDResize(evd, qlen);
}

static DAT_RETURN sr_evd_post_se(DAT_EVD_HANDLE evd, const DAT_EVENT *event)
{
	return srEVDPostSE(evd, (DAT_EVENT *)event);
}

/*
 * A Consumer polling an empty EVD (dapltest -P, dtest -p) spins on this
 * call; the completion it waits for is produced by the engine's threads in
 * the same process. Yielding the CPU after an empty poll lets them run when
 * pollers outnumber cores (2 client and 2 server threads of dapltest on 2
 * cores were 6 times slower than blocking waits without it).
 */
static DAT_RETURN sr_evd_dequeue(DAT_EVD_HANDLE evd, DAT_EVENT *event)
{
	DAT_RETURN r = srEVDDequeue(evd, event);

	if (DAT_GET_TYPE(r) == DAT_QUEUE_EMPTY)
		sched_yield();
	return r;
}

static DAT_RETURN sr_evd_free(DAT_EVD_HANDLE evd)
{
	return srEVDFree(evd);
}

/* ---- EP ------------------------------------------------------------------ */

static DAT_RETURN sr_ep_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv, DAT_EVD_HANDLE req,
			       DAT_EVD_HANDLE conn, const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep)
{
	return srEPCreate(ia, pz, recv, req, conn, NULL, (DAT_EP_ATTR *)attr, ep);
}

static DAT_RETURN sr_ep_create_with_srq(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv, DAT_EVD_HANDLE req,
					DAT_EVD_HANDLE conn, DAT_SRQ_HANDLE srq, const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep)
{
	if (srq == NULL)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
	return srEPCreate(ia, pz, recv, req, conn, srq, (DAT_EP_ATTR *)attr, ep);
}

static DAT_RETURN sr_ep_query(DAT_EP_HANDLE ep, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM *param)
{
	return srEPQuery(ep, mask, param);
}

static DAT_RETURN sr_ep_modify(DAT_EP_HANDLE ep, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM *param)
{
	return srEPModify(ep, mask, (DAT_EP_PARAM *)param);
}

static DAT_RETURN sr_ep_connect(DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL qual, DAT_TIMEOUT timeout,
				DAT_COUNT size, const DAT_PVOID pdata, DAT_QOS qos, DAT_CONNECT_FLAGS flags)
{
	return srEPConnect(ep, addr, qual, timeout, size, pdata, (uint32_t)qos, (uint32_t)flags, 0);
}

static DAT_RETURN sr_ep_common_connect(DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR addr, DAT_TIMEOUT timeout,
				       DAT_COUNT size, const DAT_PVOID pdata)
{
	return srEPConnect(ep, addr, 0, timeout, size, pdata, 0, 0, 1);
}

static DAT_RETURN sr_ep_dup_connect(DAT_EP_HANDLE ep, DAT_EP_HANDLE dup, DAT_TIMEOUT timeout, DAT_COUNT size,
				    const DAT_PVOID pdata, DAT_QOS qos)
{
	return srEPDupConnect(ep, dup, timeout, size, pdata, (uint32_t)qos);
}

static DAT_RETURN sr_ep_disconnect(DAT_EP_HANDLE ep, DAT_CLOSE_FLAGS flags)
{
	return srEPDisconnect(ep, (uint32_t)flags);
}

static DAT_RETURN sr_ep_post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
				  DAT_COMPLETION_FLAGS flags)
{
	return srEPPostSend(ep, n, iov, cookie.as_64, (uint32_t)flags, 0, 0);
}

static DAT_RETURN sr_ep_post_send_with_invalidate(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
						  DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags,
						  DAT_BOOLEAN inv, DAT_RMR_CONTEXT rmr)
{
	return srEPPostSend(ep, n, iov, cookie.as_64, (uint32_t)flags, inv ? 1 : 0, rmr);
}

static DAT_RETURN sr_ep_post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
				  DAT_COMPLETION_FLAGS flags)
{
	return srEPPostRecv(ep, n, iov, cookie.as_64, (uint32_t)flags);
}

static DAT_RETURN sr_ep_post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
				       const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags)
{
	return srEPPostRDMA(ep, 0, n, iov, cookie.as_64, (DAT_RMR_TRIPLET *)remote, (uint32_t)flags, 0);
}

static DAT_RETURN sr_ep_post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
					const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags)
{
	return srEPPostRDMA(ep, 1, n, iov, cookie.as_64, (DAT_RMR_TRIPLET *)remote, (uint32_t)flags, 0);
}

static DAT_RETURN sr_ep_post_rdma_read_to_rmr(DAT_EP_HANDLE ep, const DAT_RMR_TRIPLET *local, DAT_DTO_COOKIE cookie,
					      const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags)
{
	return srEPPostReadToRMR(ep, (DAT_RMR_TRIPLET *)local, cookie.as_64, (DAT_RMR_TRIPLET *)remote, (uint32_t)flags);
}

static DAT_RETURN sr_ep_get_status(DAT_EP_HANDLE ep, DAT_EP_STATE *state, DAT_BOOLEAN *recv_idle, DAT_BOOLEAN *req_idle)
{
	return srEPGetStatus(ep, state, recv_idle, req_idle);
}

static DAT_RETURN sr_ep_free(DAT_EP_HANDLE ep)
{
	return srEPFree(ep);
}

static DAT_RETURN sr_ep_reset(DAT_EP_HANDLE ep)
{
	return srEPReset(ep);
}

static DAT_RETURN sr_ep_recv_query(DAT_EP_HANDLE ep, DAT_COUNT *nbufs, DAT_COUNT *span)
{
	return srEPRecvQuery(ep, nbufs, span);
}

static DAT_RETURN sr_ep_set_watermark(DAT_EP_HANDLE ep, DAT_COUNT soft, DAT_COUNT hard)
{
	return srEPSetWatermark(ep, soft, hard);
}

/* ---- memory -------------------------------------------------------------- */

static DAT_RETURN sr_lmr_create(DAT_IA_HANDLE ia, DAT_MEM_TYPE mtype, DAT_REGION_DESCRIPTION region, DAT_VLEN len,
				DAT_PZ_HANDLE pz, DAT_MEM_PRIV_FLAGS priv, DAT_VA_TYPE va, DAT_LMR_HANDLE *lmr,
				DAT_LMR_CONTEXT *lctx, DAT_RMR_CONTEXT *rctx, DAT_VLEN *rlen, DAT_VADDR *raddr)
{
	void *p = region.for_va;

	if (mtype == DAT_MEM_TYPE_LMR)
		p = region.for_lmr_handle;
	return srLMRCreate(ia, (uint32_t)mtype, p, len, pz, (uint32_t)priv, (uint32_t)va, lmr, lctx, rctx, rlen, raddr);
}

static DAT_RETURN sr_lmr_query(DAT_LMR_HANDLE lmr, DAT_LMR_PARAM_MASK mask, DAT_LMR_PARAM *param)
{
	return srLMRQuery(lmr, (uint32_t)mask, param);
}

static DAT_RETURN sr_lmr_free(DAT_LMR_HANDLE lmr)
{
	return srLMRFree(lmr);
}

static DAT_RETURN sr_lmr_sync_rdma_read(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *iov, DAT_VLEN n)
{
	return srLMRSync(ia, (DAT_LMR_TRIPLET *)iov, n);
}

static DAT_RETURN sr_lmr_sync_rdma_write(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *iov, DAT_VLEN n)
{
	return srLMRSync(ia, (DAT_LMR_TRIPLET *)iov, n);
}

static DAT_RETURN sr_rmr_create(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE *rmr)
{
	return srRMRCreate(pz, rmr, 0);
}

static DAT_RETURN sr_rmr_create_for_ep(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE *rmr)
{
	return srRMRCreate(pz, rmr, 1);
}

static DAT_RETURN sr_rmr_query(DAT_RMR_HANDLE rmr, DAT_RMR_PARAM_MASK mask, DAT_RMR_PARAM *param)
{
	return srRMRQuery(rmr, (uint32_t)mask, param);
}

static DAT_RETURN sr_rmr_bind(DAT_RMR_HANDLE rmr, DAT_LMR_HANDLE lmr, const DAT_LMR_TRIPLET *t, DAT_MEM_PRIV_FLAGS priv,
			      DAT_VA_TYPE va, DAT_EP_HANDLE ep, DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags,
			      DAT_RMR_CONTEXT *ctx)
{
	return srRMRBind(rmr, lmr, (DAT_LMR_TRIPLET *)t, (uint32_t)priv, (uint32_t)va, ep, cookie.as_64, (uint32_t)flags, ctx);
}

static DAT_RETURN sr_rmr_free(DAT_RMR_HANDLE rmr)
{
	return srRMRFree(rmr);
}

static DAT_RETURN sr_pz_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE *pz)
{
	return srPZCreate(ia, pz);
}

static DAT_RETURN sr_pz_query(DAT_PZ_HANDLE pz, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM *param)
{
	return srPZQuery(pz, (uint32_t)mask, param);
}

static DAT_RETURN sr_pz_free(DAT_PZ_HANDLE pz)
{
	return srPZFree(pz);
}

/* ---- service points ------------------------------------------------------ */

static DAT_RETURN sr_psp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL qual, DAT_EVD_HANDLE evd, DAT_PSP_FLAGS flags,
				DAT_PSP_HANDLE *psp)
{
	return srPSPCreate(ia, qual, NULL, evd, (uint32_t)flags, psp);
}

static DAT_RETURN sr_psp_create_any(DAT_IA_HANDLE ia, DAT_CONN_QUAL *qual, DAT_EVD_HANDLE evd, DAT_PSP_FLAGS flags,
				    DAT_PSP_HANDLE *psp)
{
	if (qual == NULL)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	return srPSPCreate(ia, 0, qual, evd, (uint32_t)flags, psp);
}

static DAT_RETURN sr_psp_query(DAT_PSP_HANDLE psp, DAT_PSP_PARAM_MASK mask, DAT_PSP_PARAM *param)
{
	return srPSPQuery(psp, (uint32_t)mask, param);
}

static DAT_RETURN sr_psp_free(DAT_PSP_HANDLE psp)
{
	return srSPFree(psp, DAT_HANDLE_TYPE_PSP);
}

static DAT_RETURN sr_rsp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL qual, DAT_EP_HANDLE ep, DAT_EVD_HANDLE evd,
				DAT_RSP_HANDLE *rsp)
{
	return srRSPCreate(ia, qual, ep, evd, rsp);
}

static DAT_RETURN sr_rsp_query(DAT_RSP_HANDLE rsp, DAT_RSP_PARAM_MASK mask, DAT_RSP_PARAM *param)
{
	return srRSPQuery(rsp, (uint32_t)mask, param);
}

static DAT_RETURN sr_rsp_free(DAT_RSP_HANDLE rsp)
{
	return srSPFree(rsp, DAT_HANDLE_TYPE_RSP);
}

static DAT_RETURN sr_csp_create(DAT_IA_HANDLE ia, DAT_COMM *comm, DAT_IA_ADDRESS_PTR addr, DAT_EVD_HANDLE evd,
				DAT_CSP_HANDLE *csp)
{
	return srCSPCreate(ia, comm, addr, evd, csp);
}

static DAT_RETURN sr_csp_query(DAT_CSP_HANDLE csp, DAT_CSP_PARAM_MASK mask, DAT_CSP_PARAM *param)
{
	return srCSPQuery(csp, (uint32_t)mask, param);
}

static DAT_RETURN sr_csp_free(DAT_CSP_HANDLE csp)
{
	return srSPFree(csp, DAT_HANDLE_TYPE_CSP);
}

/* ---- SRQ ----------------------------------------------------------------- */

static DAT_RETURN sr_srq_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_SRQ_ATTR *attr, DAT_SRQ_HANDLE *srq)
{
	return srSRQCreate(ia, pz, attr, srq);
}

static DAT_RETURN sr_srq_free(DAT_SRQ_HANDLE srq)
{
	return srSRQFree(srq);
}

static DAT_RETURN sr_srq_post_recv(DAT_SRQ_HANDLE srq, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie)
{
	return srSRQPostRecv(srq, n, iov, cookie.as_64);
}

static DAT_RETURN sr_srq_query(DAT_SRQ_HANDLE srq, DAT_SRQ_PARAM_MASK mask, DAT_SRQ_PARAM *param)
{
	return srSRQQuery(srq, (uint32_t)mask, param);
}

static DAT_RETURN sr_srq_resize(DAT_SRQ_HANDLE srq, DAT_COUNT n)
{
	return srSRQResize(srq, n);
}

static DAT_RETURN sr_srq_set_lw(DAT_SRQ_HANDLE srq, DAT_COUNT lw)
{
	return srSRQSetLW(srq, lw);
}

/* ---- IB extensions (dat_ib_extensions.h) --------------------------------- */

/*
 * sr_extendedop unpacks the arguments of the dat_ib_post_* macros in the
 * order OFA's openib_common/ib_extensions.c reads them. Write with
 * immediate, fetch-and-add and compare-and-swap map onto the DAT extension
 * operations of package dat; the rest is DAT_NOT_IMPLEMENTED.
 */
static DAT_RETURN sr_extendedop(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args)
{
	DAT_COUNT n;
	DAT_LMR_TRIPLET *lmr;
	DAT_DTO_COOKIE cookie;
	DAT_RMR_TRIPLET *rmr;
	DAT_UINT64 a, b;
	DAT_UINT32 imm;
	DAT_COMPLETION_FLAGS flags;

	switch (op) {
	case DAT_IB_RDMA_WRITE_IMMED_OP:
		n = va_arg(args, DAT_COUNT);
		lmr = va_arg(args, DAT_LMR_TRIPLET *);
		cookie = va_arg(args, DAT_DTO_COOKIE);
		rmr = va_arg(args, DAT_RMR_TRIPLET *);
		imm = va_arg(args, DAT_UINT32);
		flags = va_arg(args, DAT_COMPLETION_FLAGS);
		return srEPPostRDMA(h, 2, n, lmr, cookie.as_64, rmr, (uint32_t)flags, imm);
	case DAT_IB_FETCH_AND_ADD_OP:
		a = va_arg(args, DAT_UINT64);
		lmr = va_arg(args, DAT_LMR_TRIPLET *);
		cookie = va_arg(args, DAT_DTO_COOKIE);
		rmr = va_arg(args, DAT_RMR_TRIPLET *);
		flags = va_arg(args, DAT_COMPLETION_FLAGS);
		return srEPPostAtomic(h, 0, a, 0, lmr, cookie.as_64, rmr, (uint32_t)flags);
	case DAT_IB_CMP_AND_SWAP_OP:
		a = va_arg(args, DAT_UINT64);
		b = va_arg(args, DAT_UINT64);
		lmr = va_arg(args, DAT_LMR_TRIPLET *);
		cookie = va_arg(args, DAT_DTO_COOKIE);
		rmr = va_arg(args, DAT_RMR_TRIPLET *);
		flags = va_arg(args, DAT_COMPLETION_FLAGS);
		return srEPPostAtomic(h, 1, a, b, lmr, cookie.as_64, rmr, (uint32_t)flags);
	default:
		return DAT_ERROR(DAT_NOT_IMPLEMENTED, 0);
	}
}

/* ---- the table ----------------------------------------------------------- */

void sr_fill_provider(DAT_PROVIDER *p, const char *device_name)
{
	memset(p, 0, sizeof(*p));
	p->device_name = device_name;
	p->extension = NULL;

	p->ia_open_func = sr_ia_open;
	p->ia_query_func = sr_ia_query;
	p->ia_close_func = sr_ia_close;

	p->set_consumer_context_func = sr_set_consumer_context;
	p->get_consumer_context_func = sr_get_consumer_context;
	p->get_handle_type_func = sr_get_handle_type;

	p->cno_create_func = sr_cno_create;
	p->cno_modify_agent_func = sr_cno_modify_agent;
	p->cno_query_func = sr_cno_query;
	p->cno_free_func = sr_cno_free;
	p->cno_wait_func = sr_cno_wait;

	p->cr_query_func = sr_cr_query;
	p->cr_accept_func = sr_cr_accept;
	p->cr_reject_func = sr_cr_reject;
	p->cr_handoff_func = sr_cr_handoff;

	p->evd_create_func = sr_evd_create;
	p->evd_query_func = sr_evd_query;
	p->evd_modify_cno_func = sr_evd_modify_cno;
	p->evd_enable_func = sr_evd_enable;
	p->evd_disable_func = sr_evd_disable;
	p->evd_wait_func = sr_evd_wait;
	p->evd_resize_func = sr_evd_resize;
	p->evd_post_se_func = sr_evd_post_se;
	p->evd_dequeue_func = sr_evd_dequeue;
	p->evd_free_func = sr_evd_free;

	p->ep_create_func = sr_ep_create;
	p->ep_query_func = sr_ep_query;
	p->ep_modify_func = sr_ep_modify;
	p->ep_connect_func = sr_ep_connect;
	p->ep_dup_connect_func = sr_ep_dup_connect;
	p->ep_disconnect_func = sr_ep_disconnect;
	p->ep_post_send_func = sr_ep_post_send;
	p->ep_post_recv_func = sr_ep_post_recv;
	p->ep_post_rdma_read_func = sr_ep_post_rdma_read;
	p->ep_post_rdma_write_func = sr_ep_post_rdma_write;
	p->ep_get_status_func = sr_ep_get_status;
	p->ep_free_func = sr_ep_free;

	p->lmr_create_func = sr_lmr_create;
	p->lmr_query_func = sr_lmr_query;
	p->lmr_free_func = sr_lmr_free;

	p->rmr_create_func = sr_rmr_create;
	p->rmr_query_func = sr_rmr_query;
	p->rmr_bind_func = sr_rmr_bind;
	p->rmr_free_func = sr_rmr_free;

	p->psp_create_func = sr_psp_create;
	p->psp_query_func = sr_psp_query;
	p->psp_free_func = sr_psp_free;

	p->rsp_create_func = sr_rsp_create;
	p->rsp_query_func = sr_rsp_query;
	p->rsp_free_func = sr_rsp_free;

	p->pz_create_func = sr_pz_create;
	p->pz_query_func = sr_pz_query;
	p->pz_free_func = sr_pz_free;

	p->psp_create_any_func = sr_psp_create_any;
	p->ep_reset_func = sr_ep_reset;
	p->evd_set_unwaitable_func = sr_evd_set_unwaitable;
	p->evd_clear_unwaitable_func = sr_evd_clear_unwaitable;
	p->lmr_sync_rdma_read_func = sr_lmr_sync_rdma_read;
	p->lmr_sync_rdma_write_func = sr_lmr_sync_rdma_write;

	p->ep_create_with_srq_func = sr_ep_create_with_srq;
	p->ep_recv_query_func = sr_ep_recv_query;
	p->ep_set_watermark_func = sr_ep_set_watermark;
	p->srq_create_func = sr_srq_create;
	p->srq_free_func = sr_srq_free;
	p->srq_post_recv_func = sr_srq_post_recv;
	p->srq_query_func = sr_srq_query;
	p->srq_resize_func = sr_srq_resize;
	p->srq_set_lw_func = sr_srq_set_lw;

	p->csp_create_func = sr_csp_create;
	p->csp_query_func = sr_csp_query;
	p->csp_free_func = sr_csp_free;
	p->ep_common_connect_func = sr_ep_common_connect;
	p->rmr_create_for_ep_func = sr_rmr_create_for_ep;
	p->ep_post_send_with_invalidate_func = sr_ep_post_send_with_invalidate;
	p->ep_post_rdma_read_to_rmr_func = sr_ep_post_rdma_read_to_rmr;
	p->cno_fd_create_func = sr_cno_fd_create;
	p->cno_trigger_func = sr_cno_trigger;
	p->ia_ha_related_func = sr_ia_ha_related;
	p->handle_extendedop_func = sr_extendedop;
}
