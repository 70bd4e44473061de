//go:build !linux

package capture

import "testing"

func xdpExchange(t *testing.T, w *Writer) { t.Log("AF_XDP frames: Linux only") }
