// RECAP_HD marks functions that must compile, and give the same bits, on the host (.cpp, C++20)
// and on the GPU (.cu, C++17 under nvcc). Headers that use it keep to C++17 and to integer and
// bit operations whose results the language fixes exactly.
#pragma once

#ifndef RECAP_HD
#if defined(__CUDACC__)
#define RECAP_HD __host__ __device__
#else
#define RECAP_HD
#endif
#endif
