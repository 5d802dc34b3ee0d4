//go:build !noasm

#include "textflag.h"

// The packing routines of stubs_amd64.go. The transposes read h rows of
// 32-bit words from SI, each lds (R8) bytes after the last, and store word
// p of row i at p*ldd + 4*i bytes from DI, ldd in R9. R10 points at row 4, R12 holds 3·lds and R11 3·ldd. Whole
// blocks of h×h words go through registers; the n%h words left go one by
// one (COPY4).

#define COPY4(s, d) \
	MOVL (s), AX; MOVL AX, d(DI); MOVL (s)(R8*1), AX; MOVL AX, d+4(DI); \
	MOVL (s)(R8*2), AX; MOVL AX, d+8(DI); MOVL (s)(R12*1), AX; MOVL AX, d+12(DI)

// func transpose8AVX(n int, src []byte, lds int, dst []byte, ldd int)
TEXT ·transpose8AVX(SB), NOSPLIT, $0-72
	MOVQ n+0(FP), CX
	MOVQ src_base+8(FP), SI
	MOVQ lds+32(FP), R8
	MOVQ dst_base+40(FP), DI
	MOVQ ldd+64(FP), R9
	LEAQ (R8)(R8*2), R12
	LEAQ (SI)(R8*4), R10
	LEAQ (R9)(R9*2), R11
	MOVQ CX, BX
	ANDQ $7, BX
	SHRQ $3, CX
	JZ   tail

block:
	// Rows r0–r7, words 0–7 of each.
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (SI)(R12*1), Y3
	VMOVUPS (R10), Y4
	VMOVUPS (R10)(R8*1), Y5
	VMOVUPS (R10)(R8*2), Y6
	VMOVUPS (R10)(R12*1), Y7

	// Interleave pairs of rows: Y8 = r0[0] r1[0] r0[1] r1[1] | r0[4] r1[4] r0[5] r1[5], ...
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15

	// Then pairs of pairs: Y0 = r0[0] r1[0] r2[0] r3[0] | r0[4] r1[4] r2[4] r3[4], ...
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7

	// Then the 128-bit halves of rows 0–3 and 4–7: word p of every row.
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	VMOVUPS    Y8, (DI)
	VMOVUPS    Y9, (DI)(R9*1)
	VMOVUPS    Y10, (DI)(R9*2)
	VMOVUPS    Y11, (DI)(R11*1)
	LEAQ       (DI)(R9*4), DI
	VMOVUPS    Y12, (DI)
	VMOVUPS    Y13, (DI)(R9*1)
	VMOVUPS    Y14, (DI)(R9*2)
	VMOVUPS    Y15, (DI)(R11*1)
	LEAQ       (DI)(R9*4), DI
	ADDQ       $32, SI
	ADDQ       $32, R10
	DECQ       CX
	JNZ        block

tail:
	TESTQ BX, BX
	JZ    done

word:
	COPY4(SI, 0)
	COPY4(R10, 16)
	ADDQ $4, SI
	ADDQ $4, R10
	ADDQ R9, DI
	DECQ BX
	JNZ  word

done:
	VZEROUPPER
	RET

// func transpose4AVX(n int, src []byte, lds int, dst []byte, ldd int)
TEXT ·transpose4AVX(SB), NOSPLIT, $0-72
	MOVQ n+0(FP), CX
	MOVQ src_base+8(FP), SI
	MOVQ lds+32(FP), R8
	MOVQ dst_base+40(FP), DI
	MOVQ ldd+64(FP), R9
	LEAQ (R8)(R8*2), R12
	LEAQ (R9)(R9*2), R11
	MOVQ CX, BX
	ANDQ $3, BX
	SHRQ $2, CX
	JZ   tail

block:
	VMOVUPS   (SI), X0
	VMOVUPS   (SI)(R8*1), X1
	VMOVUPS   (SI)(R8*2), X2
	VMOVUPS   (SI)(R12*1), X3
	VUNPCKLPS X1, X0, X4 // r0[0] r1[0] r0[1] r1[1]
	VUNPCKHPS X1, X0, X5 // r0[2] r1[2] r0[3] r1[3]
	VUNPCKLPS X3, X2, X6 // r2[0] r3[0] r2[1] r3[1]
	VUNPCKHPS X3, X2, X7 // r2[2] r3[2] r2[3] r3[3]
	VMOVLHPS  X6, X4, X0 // word 0 of each row
	VMOVHLPS  X4, X6, X1 // word 1
	VMOVLHPS  X7, X5, X2 // word 2
	VMOVHLPS  X5, X7, X3 // word 3
	VMOVUPS   X0, (DI)
	VMOVUPS   X1, (DI)(R9*1)
	VMOVUPS   X2, (DI)(R9*2)
	VMOVUPS   X3, (DI)(R11*1)
	LEAQ      (DI)(R9*4), DI
	ADDQ      $16, SI
	DECQ      CX
	JNZ       block

tail:
	TESTQ BX, BX
	JZ    done

word:
	COPY4(SI, 0)
	ADDQ $4, SI
	ADDQ R9, DI
	DECQ BX
	JNZ  word

done:
	VZEROUPPER
	RET

// func lookupAVX2(dst []float32, src []byte, lut *[256]float32, s float32)
TEXT ·lookupAVX2(SB), NOSPLIT, $0-60
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         src_base+24(FP), SI
	MOVQ         lut+48(FP), AX
	VBROADCASTSS s+56(FP), Y15
	MOVQ         CX, BX
	ANDQ         $7, BX
	SHRQ         $3, CX
	JZ           tail

block:
	VPMOVZXBD  (SI), Y0
	VPCMPEQD   Y1, Y1, Y1 // the gather clears its mask
	VPGATHERDD Y1, (AX)(Y0*4), Y2
	VMULPS     Y15, Y2, Y2
	VMOVUPS    Y2, (DI)
	ADDQ       $8, SI
	ADDQ       $32, DI
	DECQ       CX
	JNZ        block

tail:
	TESTQ BX, BX
	JZ    done

code:
	MOVBQZX (SI), DX
	VMOVSS  (AX)(DX*4), X2
	VMULSS  X15, X2, X2
	VMOVSS  X2, (DI)
	INCQ    SI
	ADDQ    $4, DI
	DECQ    BX
	JNZ     code

done:
	VZEROUPPER
	RET

// LUT32 looks the codes in Z0 up in the 32 floats of t0 and t1 into d.
#define LUT32(t0, t1, d) VMOVDQA32 Z0, d; VPERMI2PS t1, t0, d

// func lookupAVX512(dst []float32, src []byte, lut *[256]float32, s float32)
//
// The table lives in Z16–Z31, 32 codes to a pair of registers: VPERMI2PS
// looks sixteen codes up in all eight pairs by their low five bits, and a
// tree of masked moves picks each code's pair by its high three bits.
TEXT ·lookupAVX512(SB), NOSPLIT, $0-60
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         src_base+24(FP), SI
	MOVQ         lut+48(FP), AX
	VBROADCASTSS s+56(FP), Z15
	VMOVUPS      0(AX), Z16
	VMOVUPS      64(AX), Z17
	VMOVUPS      128(AX), Z18
	VMOVUPS      192(AX), Z19
	VMOVUPS      256(AX), Z20
	VMOVUPS      320(AX), Z21
	VMOVUPS      384(AX), Z22
	VMOVUPS      448(AX), Z23
	VMOVUPS      512(AX), Z24
	VMOVUPS      576(AX), Z25
	VMOVUPS      640(AX), Z26
	VMOVUPS      704(AX), Z27
	VMOVUPS      768(AX), Z28
	VMOVUPS      832(AX), Z29
	VMOVUPS      896(AX), Z30
	VMOVUPS      960(AX), Z31
	MOVL         $0x20, DX
	VPBROADCASTD DX, Z12
	MOVL         $0x40, DX
	VPBROADCASTD DX, Z13
	MOVL         $0x80, DX
	VPBROADCASTD DX, Z14
	MOVQ         CX, BX
	ANDQ         $15, BX
	SHRQ         $4, CX
	JZ           tail

block:
	VPMOVZXBD (SI), Z0
	VPTESTMD  Z12, Z0, K5 // code bit 5
	VPTESTMD  Z13, Z0, K6 // bit 6
	VPTESTMD  Z14, Z0, K7 // bit 7
	LUT32(Z16, Z17, Z1)
	LUT32(Z18, Z19, Z2)
	LUT32(Z20, Z21, Z3)
	LUT32(Z22, Z23, Z4)
	LUT32(Z24, Z25, Z5)
	LUT32(Z26, Z27, Z6)
	LUT32(Z28, Z29, Z7)
	LUT32(Z30, Z31, Z8)
	VMOVAPS   Z2, K5, Z1
	VMOVAPS   Z4, K5, Z3
	VMOVAPS   Z6, K5, Z5
	VMOVAPS   Z8, K5, Z7
	VMOVAPS   Z3, K6, Z1
	VMOVAPS   Z7, K6, Z5
	VMOVAPS   Z5, K7, Z1
	VMULPS    Z15, Z1, Z1
	VMOVUPS   Z1, (DI)
	ADDQ      $16, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       block

tail:
	TESTQ BX, BX
	JZ    done

code:
	MOVBQZX (SI), DX
	VMOVSS  (AX)(DX*4), X1
	VMULSS  X15, X1, X1
	VMOVSS  X1, (DI)
	INCQ    SI
	ADDQ    $4, DI
	DECQ    BX
	JNZ     code

done:
	VZEROUPPER
	RET

// func interleaveAVX2(dst []uint32, lo, hi []byte)
TEXT ·interleaveAVX2(SB), NOSPLIT, $0-72
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ lo_base+24(FP), SI
	MOVQ hi_base+48(FP), DX
	MOVQ CX, BX
	ANDQ $15, BX
	SHRQ $4, CX
	JZ   tail

block:
	VMOVDQU    (SI), Y0
	VMOVDQU    (DX), Y1
	VPUNPCKLWD Y1, Y0, Y2         // pairs 0–3 and 8–11
	VPUNPCKHWD Y1, Y0, Y3         // pairs 4–7 and 12–15
	VPERM2I128 $0x20, Y3, Y2, Y4  // pairs 0–7
	VPERM2I128 $0x31, Y3, Y2, Y5  // pairs 8–15
	VMOVDQU    Y4, (DI)
	VMOVDQU    Y5, 32(DI)
	ADDQ       $32, SI
	ADDQ       $32, DX
	ADDQ       $64, DI
	DECQ       CX
	JNZ        block

tail:
	TESTQ BX, BX
	JZ    done

pair:
	MOVWLZX (SI), AX
	MOVWLZX (DX), R8
	SHLL    $16, R8
	ORL     R8, AX
	MOVL    AX, (DI)
	ADDQ    $2, SI
	ADDQ    $2, DX
	ADDQ    $4, DI
	DECQ    BX
	JNZ     pair

done:
	VZEROUPPER
	RET

// Shift counts that take the high nibble of even lanes.
DATA nibbleShifts<>+0(SB)/8, $4
DATA nibbleShifts<>+8(SB)/8, $4
DATA nibbleShifts<>+16(SB)/8, $4
DATA nibbleShifts<>+24(SB)/8, $4
DATA nibbleShifts<>+32(SB)/8, $4
DATA nibbleShifts<>+40(SB)/8, $4
DATA nibbleShifts<>+48(SB)/8, $4
DATA nibbleShifts<>+56(SB)/8, $4
GLOBL nibbleShifts<>(SB), RODATA|NOPTR, $64

// func codes16AVX512(dst []float32, src []byte, cb *[16]float32, s float32)
TEXT ·codes16AVX512(SB), NOSPLIT, $0-60
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         src_base+24(FP), SI
	MOVQ         cb+48(FP), AX
	VBROADCASTSS s+56(FP), Z1
	VMULPS       (AX), Z1, Z16 // the table: cb·s
	VMOVDQU64    nibbleShifts<>(SB), Z17
	SHRQ         $4, CX
	JZ           done

block:
	VMOVQ      (SI), X0
	VPUNPCKLBW X0, X0, X0 // each byte twice
	VPMOVZXBD  X0, Z0
	VPSRLVD    Z17, Z0, Z0 // even lanes: the high nibble; VPERMPS reads 4 bits
	VPERMPS    Z16, Z0, Z2
	VMOVUPS    Z2, (DI)
	ADDQ       $8, SI
	ADDQ       $64, DI
	DECQ       CX
	JNZ        block

done:
	VZEROUPPER
	RET

// func widenAVX2(dst []float32, src []byte, s float32)
TEXT ·widenAVX2(SB), NOSPLIT, $0-52
	MOVQ         dst_base+0(FP), DI
	MOVQ         dst_len+8(FP), CX
	MOVQ         src_base+24(FP), SI
	VBROADCASTSS s+48(FP), Y15
	MOVQ         CX, BX
	ANDQ         $7, BX
	SHRQ         $3, CX
	JZ           tail

block:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMULPS    Y15, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       block

tail:
	TESTQ BX, BX
	JZ    done

half:
	MOVWLZX (SI), AX
	SHLL    $16, AX
	MOVL    AX, X0
	VMULSS  X15, X0, X0
	VMOVSS  X0, (DI)
	ADDQ    $2, SI
	ADDQ    $4, DI
	DECQ    BX
	JNZ     half

done:
	VZEROUPPER
	RET

// func splitAVX512(dst []float32, src []uint32, w int)
//
// Each run of w pairs at SI is split into w high halves at DI and w low
// halves at R11 = DI + 4w, sixteen at a time; the last vector of a run
// takes (w-1)%16+1 lanes under the mask K1.
TEXT ·splitAVX512(SB), NOSPLIT, $0-56
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), R9
	MOVQ w+48(FP), R8
	TESTQ R9, R9
	JZ   done
	LEAQ -1(R8), CX
	ANDQ $15, CX
	XORQ $15, CX
	MOVL $0xffff, AX
	SHRL CX, AX
	KMOVW AX, K1
	MOVL $0xffff0000, AX
	VPBROADCASTD AX, Z3
	LEAQ (R8*4), R10

run:
	LEAQ (DI)(R10*1), R11
	MOVQ R10, BX
	XORQ DX, DX

full:
	CMPQ BX, $64
	JLE  last
	VMOVDQU32 (SI)(DX*1), Z0
	VPANDD Z3, Z0, Z1
	VPSLLD $16, Z0, Z2
	VMOVDQU32 Z1, (DI)(DX*1)
	VMOVDQU32 Z2, (R11)(DX*1)
	ADDQ $64, DX
	SUBQ $64, BX
	JMP  full

last:
	VMOVDQU32.Z (SI)(DX*1), K1, Z0
	VPANDD Z3, Z0, Z1
	VPSLLD $16, Z0, Z2
	VMOVDQU32 Z1, K1, (DI)(DX*1)
	VMOVDQU32 Z2, K1, (R11)(DX*1)
	ADDQ R10, SI
	LEAQ (DI)(R10*2), DI
	SUBQ R8, R9
	JNZ  run
	VZEROUPPER

done:
	RET
