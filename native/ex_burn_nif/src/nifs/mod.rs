//! The NIF functions, one file per concern. Each is registered once (`sched::nif!`) and
//! decides from its decoded arguments where it runs; the Elixir side calls one name per
//! operation.

mod config;
mod device;
mod eval;
mod files;
mod model;
mod tensor;

crate::sched::nif! {
    tensor_from_binary(data, shape, dtype, device) => super::tensor::from_binary;
    tensor_to_binary(tensor, limit) => super::tensor::to_binary;
    tensor_info(tensor) => super::tensor::info;
    tensor_to_device(tensor, device) => super::tensor::to_device;
    tensor_deallocate(tensor) => super::tensor::deallocate;
    tensors_all_reduce(sets) => super::tensor::all_reduce;
    eval_op(op, args, device) => super::eval::eval_op;
    program_build(program, constants) => super::eval::program_build;
    program_run(program, args, device, timeout, hooks) => super::eval::program_run;
    op_table() => super::eval::op_table;
    build_info() => super::device::build_info;
    device_info(device) => super::device::device_info;
    device_sync(device) => super::device::device_sync;
    memory_limit(bytes) => super::device::memory_limit;
    config_get() => super::config::config_get;
    config_set(config) => super::config::config_set;
    model_new(spec, options, device) => super::model::new;
    spec_info(spec) => super::model::spec_info;
    model_train_step(model, inputs, target, opts) => super::model::train_step;
    model_train_epoch(model, inputs, target, opts, validation, pid, copies) => super::model::train_epoch;
    model_evaluate(model, inputs, target, opts) => super::model::evaluate;
    model_predict(model, inputs, batch_size) => super::model::predict;
    model_gradients(model, inputs, target) => super::model::gradients;
    model_profile_step(model, inputs, target, lr) => super::model::profile_step;
    model_call(model, request) => super::model::call;
    model_set_parameters(model, params, convert) => super::model::set_parameters;
    model_load(source, device) => super::files::model_load;
    tensors_save(tensors, path, metadata) => super::files::tensors_save;
    tensors_load(source, device) => super::files::tensors_load;
}
