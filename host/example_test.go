package host_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/softrnic/softrnic/host"
)

// Open attaches to the daemon's device when one serves it; here no daemon does (the
// socket path names none), so Options.Local runs an in-process device instead.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	d, err := host.Open("softrnic0", &host.Options{Socket: filepath.Join(dir, "softrnic0.sock"), Local: "127.0.0.1:0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	fmt.Println("attached:", d.Attached(), "steering:", d.Steering(), "ip:", d.Addr().Addr())
	// Output: attached: false steering: in-process ip: 127.0.0.1
}
