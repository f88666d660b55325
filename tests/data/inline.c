/* Built by tests/symbols/test_dwarf.py with gcc -g -O2: a function with inlined callers. */
static inline __attribute__((always_inline)) int square(int x)
{
	return x * x;
}

static inline __attribute__((always_inline)) int sum_squares(int a, int b)
{
	return square(a) + square(b);
}

__attribute__((noinline)) int compute(int a, int b)
{
	if (a > b)
		return sum_squares(a, b) - a;
	return sum_squares(b, a) * 3;
}

int main(int argc, char **argv)
{
	(void)argv;
	return compute(argc, argc + 1);
}
