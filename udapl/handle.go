//go:build udapl

package main

/*
#include "provider.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime/cgo"
	"sync"
	"unsafe"

	"github.com/softrnic/softrnic/dat"
)

// rec is the Go record behind one C handle (struct sr_handle). The package
// dat object's consumer context points back to its rec, so events and
// queries turn Go objects into C handles without a lookup table; the C
// consumer's own context lives in the C handle (dat_set_consumer_context is
// answered in C).
type rec struct {
	c   *C.struct_sr_handle
	obj dat.Handle
	ia  *iaRec // owning IA (for the IA itself, its own iaRec)

	// per-type state
	priv dat.MemPriv // LMR: the privileges the Consumer asked for
	cno  *cnoAgent   // CNO: the Consumer's proxy agent
}

// iaRec is the record of an open IA: every C handle made for its objects is
// in recs and is freed when the IA closes.
type iaRec struct {
	rec
	prov  *provider
	ia    *dat.IA
	async *rec

	mu   sync.Mutex
	recs map[*rec]struct{}
}

// newRec allocates the C handle for obj, owned by ia.
func newRec(ia *iaRec, obj dat.Handle, t dat.HandleType) *rec {
	r := &rec{obj: obj, ia: ia}
	ia.attach(r, t)
	return r
}

// attach allocates r's C handle and links the two.
func (ia *iaRec) attach(r *rec, t dat.HandleType) {
	ia.mu.Lock()
	defer ia.mu.Unlock()
	ia.attachLocked(r, t)
}

func (ia *iaRec) attachLocked(r *rec, t dat.HandleType) {
	c := (*C.struct_sr_handle)(C.calloc(1, C.sizeof_struct_sr_handle))
	c.provider = ia.prov.c
	c.magic = C.SR_MAGIC
	c._type = C.uint32_t(t)
	c.gohandle = C.uintptr_t(cgo.NewHandle(r))
	r.c = c
	if r.obj != nil {
		_ = dat.SetConsumerContext(r.obj, r)
	}
	if r != &ia.rec {
		ia.recs[r] = struct{}{}
	}
}

// free releases r's C handle (after its object was freed or destroyed).
func (r *rec) free() {
	if r == nil || r.c == nil {
		return
	}
	if r.ia != nil && r != &r.ia.rec {
		r.ia.mu.Lock()
		delete(r.ia.recs, r)
		r.ia.mu.Unlock()
	}
	c := r.c
	r.c = nil
	c.magic = 0
	cgo.Handle(c.gohandle).Delete()
	C.free(unsafe.Pointer(c))
}

// handle returns r's C handle (NULL for a nil record).
func (r *rec) handle() unsafe.Pointer {
	if r == nil || r.c == nil {
		return nil
	}
	return unsafe.Pointer(r.c)
}

// lookup returns the record of C handle h if it is a live handle of type t.
func lookup(h unsafe.Pointer, t dat.HandleType) *rec {
	if h == nil {
		return nil
	}
	c := (*C.struct_sr_handle)(h)
	if c.magic != C.SR_MAGIC || dat.HandleType(c._type) != t {
		return nil
	}
	r, _ := cgo.Handle(c.gohandle).Value().(*rec)
	return r
}

// recOf returns the record of a package dat object, creating the C handle
// for objects the provider made itself (connection requests, the EP of a
// PSP with DAT_PSP_PROVIDER_FLAG). It returns nil for nil or dead objects.
func (ia *iaRec) recOf(obj dat.Handle) *rec {
	r, _ := ia.recOfNew(obj)
	return r
}

// recOfNew is recOf that also reports whether the record was just made.
func (ia *iaRec) recOfNew(obj dat.Handle) (*rec, bool) {
	if obj == nil {
		return nil, false
	}
	v, err := dat.ConsumerContext(obj)
	if err != nil {
		return nil, false
	}
	if r, ok := v.(*rec); ok {
		return r, false
	}
	ia.mu.Lock()
	defer ia.mu.Unlock()
	if v, _ := dat.ConsumerContext(obj); v != nil {
		r, _ := v.(*rec)
		return r, false
	}
	r := &rec{obj: obj, ia: ia}
	ia.attachLocked(r, obj.HandleType())
	return r, true
}

// cHandle is recOf(obj).handle(); typed nil objects give NULL.
func (ia *iaRec) cHandle(obj dat.Handle) unsafe.Pointer {
	if obj == nil || ia == nil {
		return nil
	}
	return ia.recOf(obj).handle()
}

// Lookups by type, nil when h is not a live handle of that type.

func iaOf(h unsafe.Pointer) *iaRec {
	r := lookup(h, dat.HandleTypeIA)
	if r == nil {
		return nil
	}
	return r.ia
}

func evdOf(h unsafe.Pointer) (*rec, *dat.EVD) {
	r := lookup(h, dat.HandleTypeEVD)
	if r == nil {
		return nil, nil
	}
	return r, r.obj.(*dat.EVD)
}

func epOf(h unsafe.Pointer) (*rec, *dat.EP) {
	r := lookup(h, dat.HandleTypeEP)
	if r == nil {
		return nil, nil
	}
	return r, r.obj.(*dat.EP)
}

func pzOf(h unsafe.Pointer) (*rec, *dat.PZ) {
	r := lookup(h, dat.HandleTypePZ)
	if r == nil {
		return nil, nil
	}
	return r, r.obj.(*dat.PZ)
}

func lmrOf(h unsafe.Pointer) (*rec, *dat.LMR) {
	r := lookup(h, dat.HandleTypeLMR)
	if r == nil {
		return nil, nil
	}
	return r, r.obj.(*dat.LMR)
}

func rmrOf(h unsafe.Pointer) (*rec, *dat.RMR) {
	r := lookup(h, dat.HandleTypeRMR)
	if r == nil {
		return nil, nil
	}
	return r, r.obj.(*dat.RMR)
}

func cnoOf(h unsafe.Pointer) (*rec, *dat.CNO) {
	r := lookup(h, dat.HandleTypeCNO)
	if r == nil {
		return nil, nil
	}
	return r, r.obj.(*dat.CNO)
}

func srqOf(h unsafe.Pointer) (*rec, *dat.SRQ) {
	r := lookup(h, dat.HandleTypeSRQ)
	if r == nil {
		return nil, nil
	}
	return r, r.obj.(*dat.SRQ)
}

func crOf(h unsafe.Pointer) (*rec, *dat.CR) {
	r := lookup(h, dat.HandleTypeCR)
	if r == nil {
		return nil, nil
	}
	return r, r.obj.(*dat.CR)
}

// closeIA frees every C handle of ia (after package dat closed the IA).
func (ia *iaRec) closeAll() {
	ia.mu.Lock()
	recs := make([]*rec, 0, len(ia.recs))
	for r := range ia.recs {
		recs = append(recs, r)
	}
	ia.mu.Unlock()
	for _, r := range recs {
		r.free()
	}
	ia.rec.free()
}

func warn(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
