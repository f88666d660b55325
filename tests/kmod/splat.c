// SPDX-License-Identifier: GPL-2.0
/*
 * A kernel warning on demand, for pytest-lbr's own tests (tests/kernel/test_splat.py):
 * each write to /sys/kernel/debug/pytest_lbr_splat runs WARN(). Debian's kernels ship
 * no LKDTM, which would otherwise provoke one. Loading it taints the kernel (O, E).
 */
#include <linux/debugfs.h>
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/module.h>

static struct dentry *splat_file;

static ssize_t splat_write(struct file *file, const char __user *buf, size_t count,
			   loff_t *ppos)
{
	WARN(1, "pytest-lbr test: a warning provoked on purpose\n");
	return count;
}

static const struct file_operations splat_fops = {
	.owner = THIS_MODULE,
	.write = splat_write,
};

static int __init splat_init(void)
{
	splat_file = debugfs_create_file("pytest_lbr_splat", 0200, NULL, NULL, &splat_fops);
	return PTR_ERR_OR_ZERO(splat_file);
}

static void __exit splat_exit(void)
{
	debugfs_remove(splat_file);
}

module_init(splat_init);
module_exit(splat_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("pytest-lbr test module: a kernel warning on demand");
