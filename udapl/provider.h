/*
 * provider.h: C side of the softrnic uDAPL provider (libdaplsoftrnic.so).
 *
 * libdat2 (OFA DAPL 2.1) finds a provider's entry points through the
 * struct dat_provider it registers with dat_registry_add_provider, and
 * reaches that struct from any handle through DAT_HANDLE_TO_PROVIDER: the
 * first word of the memory a handle points to. Every handle this provider
 * returns therefore points to a struct sr_handle allocated with calloc,
 * whose first member is the provider pointer; the Go record behind it is
 * reached through the runtime/cgo.Handle stored in it.
 */
#ifndef SOFTRNIC_UDAPL_PROVIDER_H
#define SOFTRNIC_UDAPL_PROVIDER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <dat2/udat.h>
#include <dat2/dat_registry.h>
#include <dat2/dat_ib_extensions.h>

/* DAT_ERROR builds an error DAT_RETURN as OFA DAPL does (dapl.h): error
 * class bit, type and subtype. */
#ifndef DAT_ERROR
#define DAT_ERROR(Type, SubType) ((DAT_RETURN)(DAT_CLASS_ERROR | (Type) | (SubType)))
#endif

/* SR_MAGIC marks a live handle; a freed handle has magic 0 until its memory
 * is released, so a stale handle used right after its free is caught. */
#define SR_MAGIC 0x534f4654u /* "SOFT" */

/* SR_PDATA_MAX bounds the private data kept with a CR or an EP (the MPA
 * cap of 512 bytes, RFC 5044 §7.1, covers every transport). */
#define SR_PDATA_MAX 512

struct sr_handle {
	DAT_PROVIDER *provider; /* must be first: DAT_HANDLE_TO_PROVIDER */
	uint32_t magic;
	uint32_t type;          /* DAT_HANDLE_TYPE */
	uintptr_t gohandle;     /* runtime/cgo.Handle of the Go record */
	DAT_CONTEXT context;    /* dat_set_consumer_context */
	DAT_SOCK_ADDR6 local;   /* IA address, EP local address */
	DAT_SOCK_ADDR6 remote;  /* EP and CR remote address */
	DAT_COUNT pdata_len;
	unsigned char pdata[SR_PDATA_MAX]; /* CR request data; EP connection event data */
};

/* sr_fill_provider sets the function table of p (device_name included). */
void sr_fill_provider(DAT_PROVIDER *p, const char *device_name);

/* sr_set_merging fills the constant evd_stream_merging_supported matrix. */
void sr_set_merging(DAT_PROVIDER_ATTR *a, DAT_BOOLEAN v);

/* sr_call_agent calls a Consumer's CNO wait proxy agent. */
void sr_call_agent(DAT_AGENT_FUNC f, DAT_PVOID instance, DAT_EVD_HANDLE evd);

/* sr_provider_attrs are the provider-specific attributes OFA's providers
 * report and dtest reads (DAT_IB_RDMA_READ enables its RDMA Read phase). */
#define SR_NUM_PROVIDER_ATTRS 6
extern DAT_NAMED_ATTR sr_provider_attrs[SR_NUM_PROVIDER_ATTRS];

#endif
