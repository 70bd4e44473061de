package dat

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// §8.4.5 static registry format.

const specSample = `# dat.conf sample
# for device hca1 - two IAs for different P-Keys
hca00 k1.0 nonthreadsafe default /usr/local/foobarinc/kdapl.so xyz.2.3 "/dev/hca0 0" ""
hca00 u1.0 nonthreadsafe nondefault /usr/local/foobarinc/udapl_old.so xyz.2.0 "/dev/hca0 0" ""

hca12 u2.0 threadsafe default "/opt/my lib/udapl.so" ofa.dapl.2.13 "say \"hi\" \\ there" "plat # not a comment"  # trailing
`

func TestParseConfSpecSample(t *testing.T) {
	es, err := ParseConf(strings.NewReader(specSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 3 {
		t.Fatalf("%d entries", len(es))
	}
	if e := es[0]; e.IAName != "hca00" || !e.Kernel || e.APIMajor != 1 || e.APIMinor != 0 || e.ThreadSafe || !e.Default ||
		e.Library != "/usr/local/foobarinc/kdapl.so" || e.ProviderID != "xyz" || e.ProviderMajor != 2 || e.ProviderMinor != 3 ||
		e.InstanceData != "/dev/hca0 0" || e.PlatformInfo != "" {
		t.Fatalf("entry 0 = %+v", e)
	}
	e := es[2]
	if e.Library != "/opt/my lib/udapl.so" || e.ProviderID != "ofa.dapl" || e.ProviderMajor != 2 || e.ProviderMinor != 13 ||
		e.InstanceData != `say "hi" \ there` || e.PlatformInfo != "plat # not a comment" || !e.ThreadSafe || e.Kernel {
		t.Fatalf("entry 2 = %+v", e)
	}
	var buf bytes.Buffer
	if err := WriteConf(&buf, es); err != nil {
		t.Fatal(err)
	}
	back, err := ParseConf(&buf)
	if err != nil {
		t.Fatalf("reparse: %v\n%s", err, buf.String())
	}
	if !reflect.DeepEqual(back, es) {
		t.Fatalf("round trip:\n%+v\n%+v", back, es)
	}
}

func TestParseConfErrors(t *testing.T) {
	for _, line := range []string{
		`a u2.0 threadsafe default lib x.1.0 "inst"`,           // 7 fields
		`a v2.0 threadsafe default lib x.1.0 "" ""`,            // bad api prefix
		`a u2 threadsafe default lib x.1.0 "" ""`,              // no minor
		`a u2.0 maybe default lib x.1.0 "" ""`,                 // thread safety
		`a u2.0 threadsafe often lib x.1.0 "" ""`,              // default field
		`a u2.0 threadsafe default lib x.1 "" ""`,              // provider version
		`a u2.0 threadsafe default lib x.one.0 "" ""`,          // provider major
		`a u2.0 threadsafe default lib x.1.0 "unterminated ""`, // quote
	} {
		if _, err := ParseConf(strings.NewReader(line)); err == nil {
			t.Errorf("accepted %q", line)
		}
	}
}

func TestRegistryLoadAndList(t *testing.T) {
	r := NewRegistry()
	es, _ := ParseConf(strings.NewReader(specSample))
	if err := r.Load(es); err != nil {
		t.Fatal(err)
	}
	// only the u2.x entry is a uDAPL 2.0 provider
	list, n, err := r.ListProviders(10)
	if err != nil || n != 1 || len(list) != 1 || list[0].Name != "hca12" || !list[0].ThreadSafe || list[0].VersionMajor != 2 {
		t.Fatalf("list = %+v n=%d err=%v", list, n, err)
	}
	if err := r.Load(es); !errors.Is(err, ErrProviderAlreadyRegistered) {
		t.Fatalf("reload: %v", err)
	}
}

// FuzzParseConf checks that ParseConf never panics and that whatever it
// accepts survives WriteConf → ParseConf unchanged.
func FuzzParseConf(f *testing.F) {
	f.Add(specSample)
	f.Add(DefaultConf)
	f.Add(`a u2.0 threadsafe default "l i b" x.y.1.2 "\"q\"" "#"`)
	f.Fuzz(func(t *testing.T, s string) {
		es, err := ParseConf(strings.NewReader(s))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteConf(&buf, es); err != nil {
			t.Fatal(err)
		}
		back, err := ParseConf(&buf)
		if err != nil {
			t.Fatalf("reparse %q: %v", buf.String(), err)
		}
		if len(back) != len(es) {
			t.Fatalf("%d entries, reparsed %d", len(es), len(back))
		}
		for i := range es {
			if back[i] != es[i] {
				t.Fatalf("entry %d: %+v != %+v\n%s", i, back[i], es[i], buf.String())
			}
		}
	})
}

func TestRegistryLoadFile(t *testing.T) {
	path := t.TempDir() + "/dat.conf"
	if err := os.WriteFile(path, []byte(DefaultConf), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewRegistry()
	if err := r.LoadFile(path); err != nil {
		t.Fatal(err)
	}
	if r.Lookup("softrnic-iwarp") == nil {
		t.Fatal("not loaded")
	}
	if err := r.LoadFile(path + ".missing"); err == nil {
		t.Fatal("missing file loaded")
	}
}
