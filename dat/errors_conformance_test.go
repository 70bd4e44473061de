package dat

import (
	"errors"
	"net"
	"testing"
	"time"
)

// Error returns listed by the spec per function, not covered elsewhere.
func TestErrorReturnsBySection(t *testing.T) {
	s := newSide(t, "s")
	ia := s.ia
	var (
		nilIA  *IA
		nilEVD *EVD
		nilCNO *CNO
		nilPZ  *PZ
		nilLMR *LMR
		nilRMR *RMR
		nilPSP *PSP
		nilRSP *RSP
		nilCSP *CSP
		nilCR  *CR
		nilSRQ *SRQ
		nilEP  *EP
	)
	ep2, _ := ia.CreateEP(s.pz, nil, nil, nil, nil)
	rsp, err := ia.CreateRSP(freePort(t), ep2, s.cr)
	if err != nil {
		t.Fatal(err)
	}
	pe := func(_ any, err error) error { return err }
	pe3 := func(_, _ any, err error) error { return err }
	cases := []struct {
		sec  string
		err  error
		want error
	}{
		// 6.2.1
		{"6.2.1.2 close nil", nilIA.Close(CloseAbrupt), ErrInvalidHandleIA},
		{"6.2.1.5 query nil", pe3(nilIA.Query(0, 0)), ErrInvalidHandleIA},
		// 6.3.2
		{"6.3.2.1 cno create nil IA", pe(nilIA.CreateCNO(nil)), ErrInvalidHandleIA},
		{"6.3.2.2 cno fd create nil IA", pe3(nilIA.CreateCNOFD()), ErrInvalidHandleIA},
		{"6.3.2.3 cno free nil", nilCNO.Free(), ErrInvalidHandleCNO},
		{"6.3.2.4 cno wait nil", pe(nilCNO.Wait(nil, 0)), ErrInvalidHandleCNO},
		{"6.3.2.5 cno trigger nil", pe(nilCNO.Trigger()), ErrInvalidHandleCNO},
		{"6.3.2.6 cno modify agent nil", nilCNO.ModifyAgent(nil), ErrInvalidHandleCNO},
		{"6.3.2.7 cno query nil", pe(nilCNO.Query(0)), ErrInvalidHandleCNO},
		// 6.3.4
		{"6.3.4.3 evd query nil", pe(nilEVD.Query(0)), ErrInvalidHandle},
		{"6.3.4.4 evd modify cno nil", nilEVD.ModifyCNO(nil), ErrInvalidHandle},
		{"6.3.4.5 evd enable nil", nilEVD.Enable(), ErrInvalidHandle},
		{"6.3.4.6 evd disable nil", nilEVD.Disable(), ErrInvalidHandle},
		{"6.3.4.7 evd set unwaitable nil", nilEVD.SetUnwaitable(), ErrInvalidHandle},
		{"6.3.4.8 evd clear unwaitable nil", nilEVD.ClearUnwaitable(), ErrInvalidHandle},
		{"6.3.4.9 evd resize nil", nilEVD.Resize(1), ErrInvalidHandle},
		{"6.3.4.10 evd wait nil", pe3(nilEVD.Wait(nil, 0, 1)), ErrInvalidHandle},
		{"6.3.4.11 evd dequeue nil", pe(nilEVD.Dequeue()), ErrInvalidHandle},
		{"6.3.4.12 evd post_se nil", nilEVD.PostSE(nil), ErrInvalidHandle},
		// 6.4.4
		{"6.4.4.1.1 psp create non-CR EVD", pe(ia.CreatePSP(1000, s.dto, PSPConsumer)), ErrInvalidHandleEVDCR},
		{"6.4.4.1.1 psp create bad flags", pe(ia.CreatePSP(1000, s.cr, 7)), ErrInvalidParameter},
		{"6.4.4.1.2 psp create any nil IA", pe3(nilIA.CreatePSPAny(s.cr, 0)), ErrInvalidHandleIA},
		{"6.4.4.1.3 psp free nil", nilPSP.Free(), ErrInvalidHandlePSP},
		{"6.4.4.1.4 psp query nil", pe(nilPSP.Query(0)), ErrInvalidHandlePSP},
		{"6.4.4.2.1 csp create non-CR EVD", pe(ia.CreateCSP("tcp", nil, s.conn)), ErrInvalidHandleEVDCR},
		{"6.4.4.2.1 csp foreign address", pe(ia.CreateCSP("tcp", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3)}, s.cr)), ErrInvalidParameter},
		{"6.4.4.2.2 csp free nil", nilCSP.Free(), ErrInvalidHandleCSP},
		{"6.4.4.2.3 csp query nil", pe(nilCSP.Query(0)), ErrInvalidHandleCSP},
		{"6.4.4.3.1 rsp on a reserved EP", pe(ia.CreateRSP(freePort(t), ep2, s.cr)), ErrInvalidState},
		{"6.4.4.3.1 rsp bad qual", pe(ia.CreateRSP(0, s.ep, s.cr)), ErrInvalidParameter},
		{"6.4.4.3.2 rsp free nil", nilRSP.Free(), ErrInvalidHandleRSP},
		{"6.4.4.3.3 rsp query bad mask", pe(rsp.Query(0x100)), ErrInvalidParameter},
		// 6.4.5
		{"6.4.5.1 cr query nil", pe(nilCR.Query(0)), ErrInvalidHandleCR},
		{"6.4.5.2 cr accept nil", nilCR.Accept(s.ep, nil), ErrInvalidHandleCR},
		{"6.4.5.3 cr reject nil", nilCR.Reject(nil), ErrInvalidHandleCR},
		{"6.4.5.4 cr handoff nil", nilCR.Handoff(1), ErrInvalidHandleCR},
		// 6.5
		{"6.5.1 srq create nil IA", pe(nilIA.CreateSRQ(s.pz, SRQAttr{MaxRecvDTOs: 1, MaxRecvIOV: 1})), ErrInvalidHandleIA},
		{"6.5.1 srq create bad attr", pe(ia.CreateSRQ(s.pz, SRQAttr{MaxRecvDTOs: 0, MaxRecvIOV: 1})), ErrInvalidParameter},
		{"6.5.4 srq set_lw nil", nilSRQ.SetLW(0), ErrInvalidHandleSRQ},
		{"6.5.5 srq free nil", nilSRQ.Free(), ErrInvalidHandleSRQ},
		{"6.5.6 srq query nil", pe(nilSRQ.Query(0)), ErrInvalidHandleSRQ},
		{"6.5.7 srq resize nil", nilSRQ.Resize(1), ErrInvalidHandleSRQ},
		// 6.6
		{"6.6.4 ep create nil IA", pe(nilIA.CreateEP(s.pz, nil, nil, nil, nil)), ErrInvalidHandleIA},
		{"6.6.4 ep create foreign PZ", pe(ia.CreateEP(newSide(t, "o").pz, nil, nil, nil, nil)), ErrInvalidHandlePZ},
		{"6.6.5 ep create with nil SRQ", pe(ia.CreateEPWithSRQ(s.pz, nil, nil, nil, nil, &EPAttr{})), ErrInvalidHandleSRQ},
		{"6.6.8 ep free reserved", ep2.Free(), ErrInvalidState},
		{"6.6.9 ep get_status nil", func() error { _, _, _, err := nilEP.GetStatus(); return err }(), ErrInvalidHandleEP},
		{"6.6.10 ep query nil", pe(nilEP.Query(0)), ErrInvalidHandleEP},
		{"6.6.11 ep recv_query nil", pe3(nilEP.RecvQuery()), ErrInvalidHandleEP},
		{"6.6.12 ep modify nil", nilEP.Modify(EPFieldPZHandle, EPParam{}), ErrInvalidHandleEP},
		{"6.6.12 ep modify reserved EP attr while reserved", ep2.Modify(EPFieldPZHandle, EPParam{PZ: nilPZ}), nil},
		{"6.6.13 ep set_watermark bad", s.ep.SetWatermark(-5, 0), ErrInvalidParameter},
		{"6.6.14 ep connect nil", nilEP.Connect(loopback(), 1, time.Second, nil, 0, 0), ErrInvalidHandleEP},
		{"6.6.15 ep common_connect nil addr", s.ep.CommonConnect(nil, time.Second, nil), ErrInvalidAddress},
		{"6.6.15 ep common_connect port 0", s.ep.CommonConnect(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, time.Second, nil), ErrInvalidParameter},
		{"6.6.16 ep dup_connect unconnected dup", s.ep.DupConnect(ep2, time.Second, nil, 0), ErrInvalidState},
		{"6.6.17 ep disconnect nil", nilEP.Disconnect(CloseAbrupt), ErrInvalidHandleEP},
		{"6.6.18 ep reset reserved", ep2.Reset(), ErrInvalidState},
		{"6.6.21 post send inv unconnected", s.ep.PostSendWithInvalidate(nil, 0, 0, true, 1), ErrInvalidStateEPUnconnected},
		{"6.6.23 post read unconnected", s.ep.PostRDMARead(nil, 0, RMRTriplet{}, 0), ErrInvalidStateEPUnconnected},
		{"6.6.24 post read to rmr nil", nilEP.PostRDMAReadToRMR(RMRTriplet{}, 0, RMRTriplet{}, 0), ErrInvalidHandleEP},
		{"6.6.25 post write unconnected", s.ep.PostRDMAWrite(nil, 0, RMRTriplet{}, 0), ErrInvalidStateEPUnconnected},
		// 6.7
		{"6.7.1.1 pz create nil IA", pe(nilIA.CreatePZ()), ErrInvalidHandleIA},
		{"6.7.1.2 pz free nil", nilPZ.Free(), ErrInvalidHandlePZ},
		{"6.7.1.3 pz query bad mask", pe(s.pz.Query(0x80)), ErrInvalidParameter},
		{"6.7.2.1 lmr create bad va type", pe(ia.CreateLMR(make([]byte, 1), s.pz, MemPrivAll, 9)), ErrInvalidParameter},
		{"6.7.2.1 lmr from freed lmr", pe(ia.CreateLMRFromLMR(nilLMR, s.pz, MemPrivAll, VATypeVA)), ErrInvalidHandleLMR},
		{"6.7.2.2 lmr free nil", nilLMR.Free(), ErrInvalidHandleLMR},
		{"6.7.2.3 lmr query bad mask", pe(s.lmr.Query(0x1000)), ErrInvalidParameter},
		{"6.7.3.1 rmr create nil PZ", pe(nilPZ.CreateRMR()), ErrInvalidHandlePZ},
		{"6.7.3.2 rmr create for nil EP", pe(s.pz.CreateRMRForEP(nil)), ErrInvalidHandleEP},
		{"6.7.3.3 rmr free nil", nilRMR.Free(), ErrInvalidHandleRMR},
		{"6.7.3.4 rmr query nil", pe(nilRMR.Query(0)), ErrInvalidHandleRMR},
		{"6.7.3.5 rmr bind nil", pe(nilRMR.Bind(s.lmr, LMRTriplet{}, 0, 0, s.ep, 0, 0)), ErrInvalidHandleRMR},
		{"6.7.4 sync empty iov", ia.SyncRDMARead(nil), ErrInvalidParameter},
		{"6.7.4 sync nil IA", nilIA.SyncRDMAWrite(nil), ErrInvalidHandleIA},
	}
	for _, c := range cases {
		if c.want == nil {
			if c.err != nil {
				t.Errorf("%s: %v, want success", c.sec, c.err)
			}
			continue
		}
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.sec, c.err, c.want)
		}
	}
}
