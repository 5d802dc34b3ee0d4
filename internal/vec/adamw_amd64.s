//go:build !noasm

#include "textflag.h"

// func adamWAVX512(p, g, m, v []float32, s AdamWParams)
//
// Sixteen elements an iteration: DI, SI, R8 and R9 walk p, g, m and v, CX
// counts the blocks of sixteen, and Z8–Z14 hold the constants. Each Go
// operation is one instruction with the same operands in the same order
// (Go's VSUBPS b, a, c is c = a - b). It ends with VZEROUPPER, as the Z
// registers it dirties would slow later SSE code.
TEXT ·adamWAVX512(SB), NOSPLIT, $0-124
	MOVQ         p_base+0(FP), DI
	MOVQ         p_len+8(FP), CX
	MOVQ         g_base+24(FP), SI
	MOVQ         m_base+48(FP), R8
	MOVQ         v_base+72(FP), R9
	VBROADCASTSS s_Decay+96(FP), Z8
	VBROADCASTSS s_Lerp+100(FP), Z9
	VBROADCASTSS s_Beta2+104(FP), Z10
	VBROADCASTSS s_OneMinusBeta2+108(FP), Z11
	VBROADCASTSS s_BC2Sqrt+112(FP), Z12
	VBROADCASTSS s_Eps+116(FP), Z13
	VBROADCASTSS s_NegStep+120(FP), Z14
	SHRQ         $4, CX
	JZ           done

loop:
	VMOVUPS (DI), Z0 // p
	VMOVUPS (SI), Z1 // g
	VMOVUPS (R8), Z2 // m
	VMOVUPS (R9), Z3 // v
	VMULPS  Z8, Z0, Z0   // p = p·decay
	VSUBPS  Z2, Z1, Z4   // g - m
	VMULPS  Z4, Z9, Z4   // lerp·(g-m)
	VADDPS  Z4, Z2, Z2   // m = m + lerp·(g-m)
	VMULPS  Z10, Z3, Z3  // v = v·β2
	VMULPS  Z1, Z11, Z5  // (1-β2)·g
	VMULPS  Z1, Z5, Z5   // (1-β2)·g·g
	VADDPS  Z5, Z3, Z3   // v = v + (1-β2)·g·g
	VSQRTPS Z3, Z5       // d = sqrt(v)
	VDIVPS  Z12, Z5, Z5  // d = d/bc2sqrt
	VADDPS  Z13, Z5, Z5  // d = d + eps
	VDIVPS  Z5, Z2, Z6   // m/d
	VMULPS  Z6, Z14, Z6  // negStep·(m/d)
	VADDPS  Z6, Z0, Z0   // p = p + negStep·(m/d)
	VMOVUPS Z0, (DI)
	VMOVUPS Z2, (R8)
	VMOVUPS Z3, (R9)
	ADDQ    $64, DI
	ADDQ    $64, SI
	ADDQ    $64, R8
	ADDQ    $64, R9
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
