package datconf

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/softrnic/softrnic/dat"
)

func TestEntriesParseBack(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, "/x/libdaplsoftrnic.so", "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	es, err := dat.ParseConf(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 4 {
		t.Fatalf("%d entries, want 4", len(es))
	}
	want := []struct {
		name, inst string
		ts         bool
	}{{IWARP, "iwarp 10.0.0.1", false}, {IWARP, "iwarp 10.0.0.1", true},
		{RoCEv2, "rocev2 10.0.0.1", false}, {RoCEv2, "rocev2 10.0.0.1", true}}
	for i, e := range es {
		w := want[i]
		if e.IAName != w.name || e.InstanceData != w.inst || e.ThreadSafe != w.ts || !e.Default ||
			e.Kernel || e.APIMajor != 2 || e.APIMinor != 0 || e.Library != "/x/libdaplsoftrnic.so" ||
			e.ProviderID != "softrnic" || e.ProviderMajor != 1 || e.ProviderMinor != 0 {
			t.Errorf("entry %d: %+v", i, e)
		}
	}
}

func TestParseIAParams(t *testing.T) {
	for _, c := range []struct {
		in   string
		want IAParams
		inst string
	}{
		{"iwarp 127.0.0.1", IAParams{"iwarp", "127.0.0.1", 0, ""}, "iwarp 127.0.0.1"},
		{"iwarp", IAParams{"iwarp", DefaultAddress, 0, ""}, "iwarp 127.0.0.1"},
		{"rocev2 10.1.2.3:4792", IAParams{"rocev2", "10.1.2.3", 4792, ""}, "rocev2 10.1.2.3:4792"},
		{"rocev2 [::1]:4791", IAParams{"rocev2", "::1", 4791, ""}, "rocev2 [::1]:4791"},
		{"  iwarp   ::1 ", IAParams{"iwarp", "::1", 0, ""}, "iwarp ::1"},
		{"rocev2 lo", IAParams{"rocev2", "lo", 0, ""}, "rocev2 127.0.0.1"},
		{"rocev2 lo:4800", IAParams{"rocev2", "lo", 4800, ""}, "rocev2 127.0.0.1:4800"},
		{"rocev2 @softrnic0", IAParams{Transport: "rocev2", Device: "softrnic0"}, "rocev2 @softrnic0"},
	} {
		p, err := ParseIAParams(c.in)
		if err != nil || p != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.in, p, err, c.want)
			continue
		}
		inst, err := p.InstanceData()
		if err != nil || inst != c.inst {
			t.Errorf("%q: instance %q, %v; want %q", c.in, inst, err, c.inst)
		}
	}
	for _, in := range []string{"", "ib0 0", "iwarp 1.2.3.4 extra", "iwarp 1.2.3.4:80", "rocev2 x:0", "rocev2 x:99999", "rocev2 :4791",
		"iwarp @softrnic0", "rocev2 @", "rocev2 @a/b", "rocev2 @x:4791"} {
		if p, err := ParseIAParams(in); !errors.Is(err, ErrBadParams) {
			t.Errorf("%q: %+v, %v; want ErrBadParams", in, p, err)
		}
	}
	if _, err := (IAParams{Transport: "iwarp", Address: "no-such-interface0"}).InstanceData(); err == nil {
		t.Error("unknown interface resolved")
	}
}

func TestMainCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run([]string{"-lib", "lib.so", "-addr", "127.0.0.2"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	es, err := dat.ParseConf(&out)
	if err != nil || len(es) != 4 || !strings.HasSuffix(es[0].Library, "/lib.so") || es[0].Library[0] != '/' ||
		es[2].InstanceData != "rocev2 127.0.0.2" {
		t.Fatalf("%v %+v", err, es)
	}
	for _, args := range [][]string{{}, {"-addr", "1.2.3.4"}, {"-lib", "x", "extra"}, {"-lib", "x", "-addr", "a b"}} {
		out.Reset()
		if code := Run(args, &out, &errb); code != 2 || out.Len() != 0 {
			t.Errorf("%q: exit %d, output %q", args, code, out.String())
		}
	}
}
