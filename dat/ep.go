package dat

import "github.com/softrnic/softrnic/rnic"

// EP is an Endpoint (spec §6.6).
type EP struct {
	object
}

// HandleType implements Handle.
func (ep *EP) HandleType() HandleType { return HandleTypeEP }
func (ep *EP) base() *object {
	if ep == nil {
		return nil
	}
	return &ep.object
}

func (ia *IA) handleDeviceEvent(ev rnic.AsyncEvent) {}

// RMR is a Remote Memory Region (spec §6.7.3).
type RMR struct{ object }

// HandleType implements Handle.
func (r *RMR) HandleType() HandleType { return HandleTypeRMR }
func (r *RMR) base() *object {
	if r == nil {
		return nil
	}
	return &r.object
}

// CR is a Connection Request (spec §6.4.5).
type CR struct{ object }

// HandleType implements Handle.
func (c *CR) HandleType() HandleType { return HandleTypeCR }
func (c *CR) base() *object {
	if c == nil {
		return nil
	}
	return &c.object
}
