package res

import (
	"io"
	"slices"
	"testing"
)

// Flags may come before, between and after the operands, as with iproute2's rdma.
func TestParseFlagsAnywhere(t *testing.T) {
	for _, args := range [][]string{
		{"-j", "-sock", "/x.sock", "show", "mr"},
		{"show", "mr", "-j", "-sock", "/x.sock"},
		{"show", "-sock", "/x.sock", "mr", "-j"},
	} {
		o, ops, err := parse("res", args, io.Discard)
		if err != nil {
			t.Fatal(args, err)
		}
		if !o.JSON || o.Sock != "/x.sock" || !slices.Equal(ops, []string{"show", "mr"}) {
			t.Fatalf("%q: %+v %q", args, o, ops)
		}
	}
	if _, _, err := parse("res", []string{"show", "qp", "-x"}, io.Discard); err == nil {
		t.Fatal("unknown flag accepted")
	}
}
