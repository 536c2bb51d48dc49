# phos_add_kernel_module(): see the module part of simgpu.
