// Package dat is the uDAPL 2.0 API (the DAT Collaborative's Direct Access
// Transport, user level) in idiomatic Go over the softrnic engine (package
// rnic) and its iWARP (rnic/iwarp) and RoCEv2 (rnic/rocev2) transports.
//
// Every DAT function of the spec's Chapter 6 and 8 maps to a method or
// function; README.md has the table. Handles are Go pointers (*IA, *EP,
// *EVD, …; a nil pointer is DAT_HANDLE_NULL); OUT parameters are results;
// a failed DAT_RETURN is an error of type Error{Type, Subtype}:
//
//	errors.Is(err, dat.ErrInvalidHandle)   // any DAT_INVALID_HANDLE subtype
//	errors.Is(err, dat.ErrInvalidHandleEP) // exactly DAT_INVALID_HANDLE_EP
//	dat.CodeOf(err)                        // the 32-bit DAT_RETURN
//
// # Providers
//
// OpenIA opens an IA by provider name from a registry (DefaultRegistry
// holds DefaultConf, in dat.conf format: "softrnic-iwarp", an "ofa-v2-iwarp"
// alias and "softrnic-rocev2"). A provider's instance data names the
// transport and local address, "iwarp 127.0.0.1" or "rocev2 10.0.0.1:4791".
// Each IA owns one engine device and one rnic/cm Transport; a connection
// qualifier is a TCP port (iWARP) or RDMA-CM port (RoCEv2), folded into
// 33534..65534 above 0xFFFF as OFA DAPL's cma provider does.
//
// # Events
//
// EVDs (spec §6.3.4) queue events from DTO, RMR bind, connection request,
// connection, asynchronous and software streams. EVD.Wait implements the
// threshold and notification rules of spec §6.3.1 (CONFIG_THRESHOLD,
// CONFIG_NOTIFY, CONFIG_SOLICITED follow from the completion flags of the
// Endpoints feeding the EVD), is cancellable through a context (returning
// DAT_INTERRUPTED_CALL) and is woken by SetUnwaitable (DAT_INVALID_STATE)
// and IA close (DAT_ABORT). CNOs (spec §6.3.2) funnel triggers from EVDs
// without a direct waiter; CreateCNOFD gives a pollable file.
//
// Engine completions are translated on the transport goroutine that
// produced them (the CQ handler), so no goroutine is spent per EVD. The data
// path (posting, completion, Wait) does not allocate.
//
// # Connection models (spec §6.6.3)
//
//   - PSP with a Consumer EP: CreatePSP/CreatePSPAny, CR.Accept(ep, …).
//   - PSP with a provider EP: PSPProvider; the CR carries an unconfigured
//     EP in a tentative state, configured with EP.Modify, accepted with
//     CR.Accept(nil, …).
//   - RSP: CreateRSP reserves an EP for one request.
//   - CSP: CreateCSP listens on an IP address and port; EP.CommonConnect.
//
// # Limits (see README.md for the full list)
//
// EP soft/hard high watermarks are not supported (DAT_MODEL_NOT_SUPPORTED).
package dat
