package attach

import (
	"github.com/softrnic/softrnic/internal/uapi"
	"github.com/softrnic/softrnic/rnic"
)

// ListRes lists dev's resources of one kind ("cq", "mr" or "pd") for a list_res answer
// or the daemon's own device, at most MaxQPs of them; PID and Comm are left to the
// caller.
func ListRes(dev *rnic.Device, kind string) []uapi.Res {
	out := []uapi.Res{}
	switch kind {
	case "cq":
		for _, c := range dev.CQs() {
			r := uapi.Res{Kind: kind, Num: c.Num, Size: uint64(c.Depth), Used: uint64(c.Queued)}
			if c.Overflow {
				r.Flags = "overflow"
			}
			out = append(out, r)
		}
	case "pd":
		for _, p := range dev.PDs() {
			out = append(out, uapi.Res{Kind: kind, Num: p.Num, Used: uint64(p.Users)})
		}
	case "mr":
		for _, m := range dev.MRs() {
			f := m.Access.String()
			if m.FastReg {
				f += "|FastReg"
			}
			if !m.Valid {
				f += "|Invalid"
			}
			out = append(out, uapi.Res{Kind: kind, Num: m.STag, PD: m.PD, Size: m.Len, IOVA: m.IOVA, Flags: f})
		}
	}
	if len(out) > MaxQPs {
		out = out[:MaxQPs]
	}
	return out
}
