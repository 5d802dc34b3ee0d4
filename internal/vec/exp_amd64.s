//go:build !noasm

#include "textflag.h"

// expAVX512 evaluates e^x for eight float32 x at a time in float64, with
// Cody and Waite's reduction x = k·ln2 + r, |r| ≤ ln2/2, and e^x =
// 2^k·e^r; e^r is its Taylor polynomial of degree 11, whose truncation
// error is under 1.3e-14 of e^r, and the rounding errors of the reduction
// and the FMA chain add a few float64 ulps. That float64 value y is within
// eps = 2^-40 of math.Exp(x), relatively, so where y·(1-eps) and y·(1+eps)
// round to the same float32, math.Exp(x) rounds to it too: rounding is
// monotonic. The kernel stops before a block with a lane where they differ
// (or are NaN, for a NaN x, whose bits Go then gives exactly), and
// ExpF32 computes that block in Go. The check works alike for normal,
// subnormal and overflowing results.
//
// x is clamped to [expMin, expMax]: e^-104 is under half the smallest
// float32 subnormal and e^89 over MaxFloat32, with margins far wider than
// eps, so the clamp changes no result and keeps 2^k in float64's range.

#define CONST64(name, value) DATA name<>+0(SB)/8, value; GLOBL name<>(SB), RODATA|NOPTR, $8

CONST64(expMin, $-104.0)
CONST64(expMax, $89.0)
CONST64(log2e, $0x3ff71547652b82fe)      // math.Log2E
CONST64(ln2Hi, $0x3fe62e42fee00000)      // math's Ln2Hi, ln2's first 32 bits
CONST64(ln2Lo, $0x3dea39ef35793c76)      // math's Ln2Lo, ln2 - Ln2Hi
CONST64(onePlusEps, $0x3ff0000000001000) // 1 + 2^-40
CONST64(oneMinusEps, $0x3fefffffffffe000) // 1 - 2^-40
CONST64(one, $0x3ff0000000000000)
CONST64(c2, $0x3fe0000000000000)         // 1/2!
CONST64(c3, $0x3fc5555555555555)         // 1/3!, rounded to float64
CONST64(c4, $0x3fa5555555555555)
CONST64(c5, $0x3f81111111111111)
CONST64(c6, $0x3f56c16c16c16c17)
CONST64(c7, $0x3f2a01a01a01a01a)
CONST64(c8, $0x3efa01a01a01a01a)
CONST64(c9, $0x3ec71de3a556c734)
CONST64(c10, $0x3e927e4fb7789f5c)
CONST64(c11, $0x3e5ae64567f544e4)        // 1/11!

// func expAVX512(dst, src []float32) int
//
// DI and SI walk dst and src; CX counts the blocks of eight left, and AX
// the elements set.
TEXT ·expAVX512(SB), NOSPLIT, $0-56
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         src_base+24(FP), SI
	XORQ         AX, AX
	VBROADCASTSD expMin<>(SB), Z12
	VBROADCASTSD expMax<>(SB), Z13
	VBROADCASTSD log2e<>(SB), Z14
	VBROADCASTSD ln2Hi<>(SB), Z15
	VBROADCASTSD ln2Lo<>(SB), Z16
	VBROADCASTSD onePlusEps<>(SB), Z17
	VBROADCASTSD oneMinusEps<>(SB), Z18
	VBROADCASTSD c11<>(SB), Z20
	VBROADCASTSD c10<>(SB), Z21
	VBROADCASTSD c9<>(SB), Z22
	VBROADCASTSD c8<>(SB), Z23
	VBROADCASTSD c7<>(SB), Z24
	VBROADCASTSD c6<>(SB), Z25
	VBROADCASTSD c5<>(SB), Z26
	VBROADCASTSD c4<>(SB), Z27
	VBROADCASTSD c3<>(SB), Z28
	VBROADCASTSD c2<>(SB), Z29
	VBROADCASTSD one<>(SB), Z30
	SHRQ         $3, CX
	JZ           done

loop:
	// VMAXPD and VMINPD return their second operand, x, where either is
	// NaN: the NaN goes on to fail the check below.
	VCVTPS2PD    (SI), Z0
	VMAXPD       Z0, Z12, Z0   // max(expMin, x)
	VMINPD       Z0, Z13, Z0   // x, clamped
	VMULPD       Z14, Z0, Z1   // x·log2e
	VRNDSCALEPD  $0, Z1, Z1    // k, to nearest
	VFNMADD231PD Z15, Z1, Z0   // x - k·Ln2Hi
	VFNMADD231PD Z16, Z1, Z0   // r = x - k·Ln2Hi - k·Ln2Lo

	// e^r by Horner's scheme, each step one FMA.
	VMOVAPD      Z20, Z2
	VFMADD213PD  Z21, Z0, Z2
	VFMADD213PD  Z22, Z0, Z2
	VFMADD213PD  Z23, Z0, Z2
	VFMADD213PD  Z24, Z0, Z2
	VFMADD213PD  Z25, Z0, Z2
	VFMADD213PD  Z26, Z0, Z2
	VFMADD213PD  Z27, Z0, Z2
	VFMADD213PD  Z28, Z0, Z2
	VFMADD213PD  Z29, Z0, Z2
	VFMADD213PD  Z30, Z0, Z2
	VFMADD213PD  Z30, Z0, Z2   // e^r
	VSCALEFPD    Z1, Z2, Z2    // y = e^r·2^k

	VMULPD       Z17, Z2, Z3   // y·(1+eps)
	VMULPD       Z18, Z2, Z4   // y·(1-eps)
	VCVTPD2PS    Z3, Y3
	VCVTPD2PS    Z4, Y4
	VCVTPS2PD    Y3, Z5
	VCVTPS2PD    Y4, Z6
	VCMPPD       $4, Z6, Z5, K1 // NEQ_UQ: differ, or NaN
	KORTESTW     K1, K1
	JNZ          done
	VMOVUPS      Y3, (DI)
	ADDQ         $32, SI
	ADDQ         $32, DI
	ADDQ         $8, AX
	DECQ         CX
	JNZ          loop

done:
	MOVQ AX, ret+48(FP)
	VZEROUPPER
	RET
