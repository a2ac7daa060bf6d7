# The virtual (MadFS) engine: model, concurrency, crash and damage suites.
mapfs_test(overlay_virtual_model_test ${CMAKE_CURRENT_LIST_DIR}/virtual_model_test.cc LABELS overlay)
mapfs_test(overlay_virtual_concurrency_test ${CMAKE_CURRENT_LIST_DIR}/virtual_concurrency_test.cc LABELS overlay THREADS)
mapfs_test(overlay_virtual_crash_test ${CMAKE_CURRENT_LIST_DIR}/virtual_crash_test.cc LABELS overlay)
mapfs_test(overlay_virtual_damage_test ${CMAKE_CURRENT_LIST_DIR}/virtual_damage_test.cc LABELS overlay)
mapfs_test(overlay_virtual_view_test ${CMAKE_CURRENT_LIST_DIR}/virtual_view_test.cc LABELS overlay THREADS)
add_test(NAME overlay.VirtualCli COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/virtual_cli_test.sh $<TARGET_FILE:mapfs_cli>)
set_tests_properties(overlay.VirtualCli PROPERTIES LABELS overlay TIMEOUT 120)
mapfs_test(overlay_virtual_multiprocess_test ${CMAKE_CURRENT_LIST_DIR}/virtual_multiprocess_test.cc LABELS overlay
           THREADS_CASES "Format|ACommitThatMovesABlock|AMapperSlotNotYetReady")  # the cases that start a thread
